// `loom config keys [SECTION]`: the reference of every config key (docs/config.md).
#include <algorithm>
#include <cstdio>
#include "commands.h"
#include "loom/train/config_file.h"
#include "loom/train/config_keys.h"

namespace loom::cli {

namespace {

struct ConfigKeysArgs {
  std::string section;
  bool markdown = false;
};

void add_config_keys(CLI::App& cmd, ConfigKeysArgs& a) {
  cmd.description("list every config key: its type, default, allowed values and meaning");
  cmd.add_option("section", a.section, "only this section (run, model, train, optim, ...)")
      ->type_name("SECTION");
  cmd.add_flag("--markdown", a.markdown, "as docs/config.md (the whole reference)");
}

int config_keys_command(const ConfigKeysArgs& a) {
  if (a.markdown) return std::fputs(train::config_keys_markdown().c_str(), stdout), 0;
  const std::string text = train::config_keys_text(a.section);
  if (text.empty()) {
    std::vector<std::string> sections;
    for (const std::string& name : train::config_key_names())
      if (const std::string s = name.substr(0, name.find('.'));
          std::find(sections.begin(), sections.end(), s) == sections.end())
        sections.push_back(s);
    std::string known, near = train::closest_word(a.section, sections);
    for (const std::string& s : sections) known += (known.empty() ? "" : ", ") + s;
    std::fprintf(stderr, "loom config keys: no section [%s]%s (sections: %s)\n", a.section.c_str(),
                 near.empty() ? "" : (" (did you mean " + near + "?)").c_str(), known.c_str());
    return 2;
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace

void add_config_commands(CLI::App& loom, int& code) {
  CLI::App* config = loom.add_subcommand("config")->require_subcommand(1);
  auto a = std::make_shared<ConfigKeysArgs>();
  CLI::App* keys = config->add_subcommand("keys");
  add_config_keys(*keys, *a);
  keys->callback([a, &code] { code = config_keys_command(*a); });
}

}  // namespace loom::cli
