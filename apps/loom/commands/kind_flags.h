// What `loom sample` and `loom eval` share: the flags of each model kind in its group, the
// checkpoint's kind, and its command run with a wrong flag reported as a usage error.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "loom/train/model_spec.h"
#include "loom/train/recipes/commands.h"

namespace loom::cli {

// --experts and --routing: a router's experts, and their mixture.
void add_expert_flags(CLI::App& cmd, std::vector<std::string>& experts, std::string& routing);

// The spec of a checkpoint's model kind; `command` names the command in errors.
const train::ModelSpec& checkpoint_spec(const std::string& checkpoint, const char* command);

// "a dit model", "an autoencoder model": what a checkpoint holds, as errors say it.
std::string model_of(const train::ModelSpec& spec);

// Refuses, as usage errors, the flags given of the groups `spec` does not read.
void check_kind_flags(const CLI::App& cmd, const train::ModelSpec& spec,
                      const std::string& checkpoint);

// A kind without the command (null) is an error, said before any flag is checked.
template <typename Call>
void require_kind_command(void (*command)(const Call&), const std::string& checkpoint,
                          const char* name, const train::ModelSpec& spec) {
  LOOM_CHECK(command != nullptr) << name << ": " << checkpoint << " holds " << model_of(spec)
                                 << ", which `loom " << name << "` has nothing for";
}

// Runs a kind's command; a kind without one is an error, a FlagError a usage error.
template <typename Call>
void run_kind_command(void (*command)(const Call&), const Call& call, const char* name,
                      const train::ModelSpec& spec) {
  require_kind_command(command, call.checkpoint, name, spec);
  try {
    command(call);
  } catch (const train::FlagError& e) {
    throw CLI::ValidationError(e.flag(), e.message());
  }
}

}  // namespace loom::cli
