// `loom sample CHECKPOINT`: what the checkpoint's model kind makes of it (its spec's sample):
// a DiT's sample grid and arrays, a GPT's continuation of a prompt, a router's experts' mixture.
// The flags of every kind, each kind's in its group; the checkpoint's kind says which apply.
#include "commands.h"
#include "kind_flags.h"
#include "loom/checkpoint/run_checkpoints.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/recipes/commands.h"
#include "numbers.h"

namespace loom::cli {

namespace {

struct SampleArgs {
  std::string checkpoint;
  int64_t seed = 0;
  train::SampleCall call;
};

void add_sample(CLI::App& cmd, SampleArgs& a) {
  cmd.description(
      "DiT checkpoint: sample it (EMA weights) into a PNG grid and/or .npy files; MMDiT "
      "checkpoint: canvases for a caption (--prompt) into a PNG grid; GPT checkpoint: continue a "
      "prompt (temperature 0: greedy)");
  cmd.add_option("CHECKPOINT_DIR", a.checkpoint, kCheckpointHelp)->required();
  add_int(cmd, "--seed", a.seed, "sampling seed", std::numeric_limits<int64_t>::min(),
          std::numeric_limits<int64_t>::max());
  train::DitSampleOptions& dit = a.call.dit;
  cmd.option_defaults()->group(train::kDitFlags);
  add_int(cmd, "--per-class", dit.per_class, "samples per class");
  add_int(cmd, "--class", dit.only_class, "sample this class alone (one row; -1: every class)", -1);
  add_int(cmd, "--steps", dit.steps, "sampler steps");
  add_number(cmd, "--cfg", dit.cfg_scale, "classifier-free guidance scale");
  cmd.add_flag("--heun", dit.heun, "Heun's sampler (second order)");
  add_expert_flags(cmd, a.call.experts, a.call.routing);
  cmd.option_defaults()->group(train::kDitFlags);
  dit.png_path = "samples.png";
  cmd.add_option("--png", dit.png_path, "the grid, one row per class")->type_name("PATH");
  cmd.add_option("--npy", dit.npy_prefix, "write PREFIX_images.npy and PREFIX_labels.npy")
      ->type_name("PREFIX");
  train::GptSampleOptions& gpt = a.call.gpt;
  cmd.option_defaults()->group(train::kGptFlags);
  cmd.option_defaults()->group(train::kPromptFlags);
  cmd.add_option("--prompt", a.call.prompt,
                 "GPT: the text to continue; MMDiT: the caption (default: held-out captions)")
      ->type_name("TEXT");
  cmd.option_defaults()->group(train::kGptFlags);
  add_int(cmd, "--tokens", gpt.tokens, "tokens to add");
  add_number(cmd, "--temperature", gpt.temperature, "0: greedy")->type_name("T");
  add_int(cmd, "--top-k", gpt.top_k, "draw among the K most likely tokens (0: all)");
  add_number(cmd, "--top-p", gpt.top_p,
             "draw among the fewest most likely tokens whose "
             "probability reaches P (1: all)")
      ->type_name("P");
  cmd.add_flag(
      "--no-kv-cache", [&gpt](int64_t) { gpt.kv_cache = false; },
      "run the whole window for each token (no KV cache: for comparison)");
  cmd.add_option("--logits", gpt.logits_npy, "also write the prompt's logits (T, vocab) as .npy")
      ->type_name("FILE");
}

void sample_command(const CLI::App& cmd, SampleArgs a) {
  train::SampleCall& call = a.call;
  call.checkpoint = checkpoint_from_user_path(a.checkpoint);
  if (cmd.get_option("--png")->count() > 0) train::check_output_path(call.dit.png_path, "--png");
  if (!call.dit.npy_prefix.empty())
    for (const char* part : {"_images.npy", "_labels.npy"})
      train::check_output_path(call.dit.npy_prefix + part, "--npy");
  if (!call.gpt.logits_npy.empty()) train::check_output_path(call.gpt.logits_npy, "--logits");
  const train::ModelSpec& spec = checkpoint_spec(call.checkpoint, "sample");
  require_kind_command(spec.sample, call.checkpoint, "sample", spec);
  check_kind_flags(cmd, spec, call.checkpoint);
  call.dit.seed = call.gpt.seed = uint64_t(a.seed);
  call.gpt.prompt = call.prompt;
  run_kind_command(spec.sample, call, "sample", spec);
}

}  // namespace

void add_sample_command(CLI::App& loom, int& code) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = loom.add_subcommand("sample");
  add_sample(*cmd, *a);
  cmd->callback([a, cmd, &code] {
    sample_command(*cmd, *a);
    code = 0;
  });
}

}  // namespace loom::cli
