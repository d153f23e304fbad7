#include "help.h"

#include <sstream>

#include "loom/train/config_file.h"

namespace loom::cli {

namespace {

// ---- Help in the layout `loom --help` has always had: per command its synopsis ("  train
// CONFIG.toml [--set section.key=value ...] ...", made from its options) and what it does
// indented below it; `loom COMMAND --help` adds the command's options.

// Words in lines of at most 96 columns, indented `first` columns, then `rest`.
std::string fill(const std::vector<std::string>& words, size_t first, size_t rest) {
  std::string out, line(first, ' ');
  size_t indent = first;
  for (const std::string& w : words) {
    if (line.size() > indent && line.size() + 1 + w.size() > 96) {
      out += line + "\n";
      line.assign(indent = rest, ' ');
    }
    line += (line.size() > indent ? " " : "") + w;
  }
  return out + line + "\n";
}

// "tokenizer train": a command's words after `loom`.
std::string command_path(const CLI::App* command) {
  const CLI::App* parent = command->get_parent();
  if (parent == nullptr || parent->get_parent() == nullptr) return command->get_name();
  return command_path(parent) + " " + command->get_name();
}

// One option as a synopsis shows it: "CHECKPOINT_DIR", "-n N", "[--steps N]", "[--heun]".
std::string synopsis_word(const CLI::Option* o) {
  std::string word;
  if (o->get_positional()) {
    word = o->get_name() + (o->get_expected_max() > 1 ? " ..." : "");
  } else {
    word = o->get_snames().empty() ? "--" + o->get_lnames()[0] : "-" + o->get_snames()[0];
    if (!o->get_type_name().empty()) word += " " + o->get_type_name();
  }
  return o->get_required() ? word : "[" + word + "]";
}

// A command's synopsis and what it does. Positionals that take the rest of the words
// (launch's COMMAND) follow a `--`.
std::string entry(const CLI::App* command) {
  std::vector<std::string> synopsis = {command_path(command)}, description;
  for (const CLI::Option* o : command->get_options()) {
    if (o == command->get_help_ptr()) continue;
    const bool rest = o->get_positional() && command->get_positionals_at_end();
    synopsis.push_back((rest ? "-- " : "") + synopsis_word(o));
  }
  std::istringstream words(command->get_description());
  for (std::string w; words >> w;) description.push_back(w);
  return fill(synopsis, 2, 8) + fill(description, 6, 6);
}

// Its subcommands but the hidden one (`loom help`).
std::vector<const CLI::App*> subcommands(const CLI::App* command) {
  return command->get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); });
}

// The entry of a command, or those of its subcommands (tokenizer train, tokenizer check).
std::string entries(const CLI::App* command) {
  std::string out = subcommands(command).empty() ? entry(command) : "";
  for (const CLI::App* s : subcommands(command)) out += entries(s);
  return out;
}

}  // namespace

std::string loom_help(const CLI::App& loom) {
  return "usage: loom <command> [args]   (loom <command> --help: that command)\n" + entries(&loom);
}

std::string Help::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const {
  if (app->get_parent() == nullptr) return loom_help(*app);
  std::string out = "usage: " + name + " ...\n" + entries(app);
  if (subcommands(app).empty()) out += make_positionals(app) + make_groups(app, {});
  return out;
}

std::string Help::make_option_opts(const CLI::Option* o) const {
  return o->get_positional() ? "" : CLI::Formatter::make_option_opts(o);
}

std::string Help::make_option_name(const CLI::Option* o, bool positional) const {
  const std::string name = CLI::Formatter::make_option_name(o, positional);
  return name.substr(0, name.find('{'));
}

// ---- A usage error says what is wrong and where to read how it goes, and exits with status 2
// (a command that fails exits 1). Checks after parsing throw CLI::ValidationError for this.

int usage_error(const CLI::App& loom, const CLI::ParseError& e) {
  const CLI::App* command = &loom;
  while (!command->get_subcommands().empty()) command = command->get_subcommands()[0];
  const std::string path = command == &loom ? "" : command_path(command) + " ";
  std::string message = e.what();
  if (!subcommands(command).empty()) {  // the (sub)command itself is missing or unknown
    const auto words = command->remaining();
    message = words.empty() ? "no command given" : "unknown command '" + path + words[0] + "'";
    if (!words.empty()) {
      std::vector<std::string> names;
      for (const CLI::App* sub : subcommands(command)) names.push_back(sub->get_name());
      if (const std::string near = loom::train::closest_word(words[0], names); !near.empty())
        message += " (did you mean '" + path + near + "'?)";
    }
  }
  std::fprintf(stderr, "loom: error: %s\nrun 'loom %s--help'\n", message.c_str(), path.c_str());
  return 2;
}

}  // namespace loom::cli
