// What `loom sample` and `loom eval` hand a checkpoint's model kind (its spec's sample and
// eval, train/model_spec.h): every flag of the command, in groups by the kinds that read them.
// The command line has refused the groups the kind does not take (ModelSpec::command_flags).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/train/recipes/dit.h"
#include "loom/train/recipes/gpt.h"

namespace loom::train {

// The flag groups (as `loom sample --help` and `loom eval --help` show them).
constexpr const char* kDitFlags = "DiT checkpoints";
constexpr const char* kGptFlags = "GPT checkpoints";
constexpr const char* kRouterFlags = "dit_router checkpoints";
constexpr const char* kPromptFlags = "GPT or MMDiT checkpoints";

struct SampleCall {
  std::string checkpoint;            // a step-NNNNNN directory
  std::string prompt;                // kPromptFlags: a GPT's text to continue, an MMDiT's caption
  DitSampleOptions dit;              // kDitFlags (seed: --seed)
  GptSampleOptions gpt;              // kGptFlags (seed: --seed)
  std::vector<std::string> experts;  // kRouterFlags: the experts' checkpoints, their mixture
  std::string routing = "full";
};

struct EvalCall {
  std::string checkpoint;
  std::string out;                    // where the figures go (the command line chose it)
  int64_t windows = 0;                // kGptFlags: held-out windows (0: all the text)
  int64_t samples = 1000, steps = 0;  // kDitFlags; steps 0: the run's [sample] steps
  double cfg_scale = -1;              // negative: the run's [sample] cfg_scale
  std::string sampler;                // "" (the run's [sample] heun), "euler" or "heun"
  std::string precision;              // "" (the run's train.precision), "f32" or "bf16"
  std::string classifier;             // the classifier's run directory
  std::vector<std::string> experts;   // kRouterFlags
  std::string routing = "full";
};

// A flag given wrongly for the checkpoint at hand: the command line reports it as a usage
// error of `flag`.
class FlagError : public Error {
 public:
  FlagError(std::string flag, const std::string& message)
      : Error(message), flag_(std::move(flag)) {}
  const std::string& flag() const { return flag_; }

 private:
  std::string flag_;
};

// The DiT's and the experts' sampler settings for `loom eval`: the flags given, else the
// run's [sample] section and train.precision (dit_eval.cpp).
DitSampleOptions eval_sample_options(const Config& run, const EvalCall& call);

// Each kind's commands (in its spec's ModelSpec::sample and eval).
void sample_dit_command(const SampleCall& call);  // dit_eval.cpp
void eval_dit_command(const EvalCall& call);
void sample_mmdit_command(const SampleCall& call);  // mmdit.cpp
void eval_mmdit_command(const EvalCall& call);

}  // namespace loom::train
