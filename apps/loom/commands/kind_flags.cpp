#include "kind_flags.h"

#include <algorithm>

#include "loom/train/checkpoint_dir.h"

namespace loom::cli {

void add_expert_flags(CLI::App& cmd, std::vector<std::string>& experts, std::string& routing) {
  cmd.add_option("--experts", experts, "with a dit_router checkpoint: its experts' checkpoints")
      ->delimiter(',')
      ->type_name("DIR,DIR,...")
      ->group(train::kRouterFlags);
  cmd.add_option("--routing", routing, "the experts' mixture")
      ->check(CLI::IsMember({"full", "top1", "top2"}).description(""))
      ->type_name("full|top1|top2")
      ->group(train::kRouterFlags);
}

const train::ModelSpec& checkpoint_spec(const std::string& checkpoint, const char* command) {
  return train::model_spec(train::checkpoint_model_kind(checkpoint),
                           std::string(command) + ": " + checkpoint);
}

std::string model_of(const train::ModelSpec& spec) {
  const std::string name = spec.name;
  const bool vowel = !name.empty() && std::string("aeiou").find(name[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + name + " model";
}

void check_kind_flags(const CLI::App& cmd, const train::ModelSpec& spec,
                      const std::string& checkpoint) {
  for (const char* group :
       {train::kDitFlags, train::kGptFlags, train::kRouterFlags, train::kPromptFlags}) {
    const std::vector<std::string>& read = spec.command_flags;
    if (std::find(read.begin(), read.end(), group) != read.end()) continue;
    std::string given;
    for (const CLI::Option* o : cmd.get_options())
      if (o->get_group() == group && o->count() > 0)
        given += (given.empty() ? "" : ", ") + o->get_name();
    const std::string one = std::string(group).substr(0, std::string(group).size() - 1);
    if (!given.empty())
      throw CLI::ValidationError(
          given, "needs a " + one + ", and " + checkpoint + " holds " + model_of(spec));
  }
}

}  // namespace loom::cli
