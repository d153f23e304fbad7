// `loom eval CHECKPOINT`: the checkpoint's model kind's evaluation (its spec's eval): a GPT's
// held-out loss, a DiT's (or a router's experts') class accuracy and FID; the figures also as
// JSON.
#include <filesystem>

#include "commands.h"
#include "kind_flags.h"
#include "loom/checkpoint/run_checkpoints.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/recipes/commands.h"
#include "numbers.h"

namespace loom::cli {

namespace {

void add_eval(CLI::App& cmd, train::EvalCall& a) {
  cmd.description(
      "GPT: held-out loss (nats/token, nats/byte, bits/byte) over the whole held-out text, or N "
      "evenly spread windows of it; DiT: class accuracy and FID of N samples against the "
      "classifier's features (docs/evaluation.md)");
  cmd.add_option("CHECKPOINT_DIR", a.checkpoint, kCheckpointHelp)->required();
  cmd.add_option("--out", a.out,
                 "the figures as JSON (default: eval-step-NNNNNN.json in the run directory)")
      ->type_name("FILE");
  add_int(cmd, "--windows", a.windows, "held-out windows (0: all the text)", 0)
      ->group(train::kGptFlags);
  cmd.option_defaults()->group(train::kDitFlags);
  add_int(cmd, "--samples", a.samples, "samples");
  add_int(cmd, "--steps", a.steps, "sampler steps (0: the run's [sample] steps)");
  add_number(cmd, "--cfg", a.cfg_scale, "guidance scale (negative: the run's [sample] cfg_scale)");
  cmd.add_option("--sampler", a.sampler, "euler or heun (default: the run's [sample] heun)")
      ->type_name("euler|heun")
      ->check(CLI::IsMember({"euler", "heun"}).description(""));
  cmd.add_option("--precision", a.precision,
                 "the sampler's autocast (default: the run's train.precision)")
      ->type_name("f32|bf16")
      ->check(CLI::IsMember({"f32", "bf16"}).description(""));
  a.classifier = "assets/fmnist_classifier";
  cmd.add_option("--classifier", a.classifier, "the classifier's run directory")->type_name("DIR");
  add_expert_flags(cmd, a.experts, a.routing);
}

void eval_command(const CLI::App& cmd, train::EvalCall a) {
  a.checkpoint = checkpoint_from_user_path(a.checkpoint);
  const train::ModelSpec& spec = checkpoint_spec(a.checkpoint, "eval");
  require_kind_command(spec.eval, a.checkpoint, "eval", spec);
  check_kind_flags(cmd, spec, a.checkpoint);
  // By default eval-step-NNNNNN.json in the run directory: beside the run's own eval.json
  // (never replacing it), not inside the checkpoint; a later evaluation of the same checkpoint
  // replaces it.
  const std::filesystem::path ckpt(a.checkpoint);
  if (a.out.empty())
    a.out = (ckpt.parent_path() / ("eval-" + ckpt.filename().string() + ".json")).string();
  else
    train::check_output_path(a.out, "--out");
  run_kind_command(spec.eval, a, "eval", spec);
}

}  // namespace

void add_eval_command(CLI::App& loom, int& code) {
  auto a = std::make_shared<train::EvalCall>();
  CLI::App* cmd = loom.add_subcommand("eval");
  add_eval(*cmd, *a);
  cmd->callback([a, cmd, &code] {
    eval_command(*cmd, *a);
    code = 0;
  });
}

}  // namespace loom::cli
