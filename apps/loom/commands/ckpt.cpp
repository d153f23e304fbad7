// `loom ckpt export | verify`: a checkpoint as one file (or a Hugging Face model), and checked.
#include <cstdio>
#include "commands.h"
#include "kind_flags.h"
#include "loom/checkpoint/run_checkpoints.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/train/checkpoint_dir.h"
#include "numbers.h"

namespace loom::cli {

namespace {

struct CkptExportArgs {
  std::string checkpoint, out, part = "model", format = "safetensors", dtype = "f32";
  double shard_mb = 5000;
};

void add_ckpt_export(CLI::App& cmd, CkptExportArgs& a) {
  cmd.description(
      "write one part of a (sharded) checkpoint as one consolidated file; --format hf: a GPT "
      "checkpoint as a Hugging Face model directory (model.safetensors and config.json for "
      "GPT2LMHeadModel or LlamaForCausalLM)");
  cmd.add_option("CHECKPOINT_DIR", a.checkpoint, kCheckpointHelp)->required();
  cmd.add_option("OUT", a.out, "the file to write (--format hf: the directory)")->required();
  cmd.add_option("--part", a.part, "the part to write")->type_name("model|ema|optimizer");
  cmd.add_option("--format", a.format, "the output's format")
      ->check(CLI::IsMember({"safetensors", "hf"}).description(""))
      ->type_name("safetensors|hf");
  cmd.add_option("--dtype", a.dtype, "--format hf: the tensors' dtype")
      ->check(CLI::IsMember({"f32", "bf16"}).description(""))
      ->type_name("f32|bf16");
  add_number(cmd, "--shard-mb", a.shard_mb, "--format hf: the largest file, in MB", true);
}

int ckpt_export_command(const CLI::App& cmd, CkptExportArgs a) {
  a.checkpoint = checkpoint_from_user_path(a.checkpoint);
  train::check_output_path(a.out, "ckpt export");
  if (a.format == "hf") {
    if (cmd.get_option("--part")->count() > 0)
      throw CLI::ValidationError("--part", "--format hf writes the model");
    const train::ModelSpec& spec = checkpoint_spec(a.checkpoint, "ckpt export --format hf");
    if (!spec.export_hf) {
      std::string kinds;  // the kinds with a Hugging Face format
      for (const train::ModelSpec* s : train::model_specs())
        if (s->export_hf) kinds += std::string(kinds.empty() ? "" : " or ") + s->name;
      LOOM_FAIL() << "ckpt export --format hf: " << a.checkpoint << " is a checkpoint of a "
                  << spec.name << " model, not a " << kinds << " (the kinds with a Hugging Face "
                  << "format)";
    }
    const train::HfExport e =
        spec.export_hf(a.checkpoint, a.out, dtype_from_name(a.dtype), int64_t(a.shard_mb * 1e6));
    std::printf(
        "%s: %s, %lld tensors, %lld bytes (%s) in %lld file%s, config.json and "
        "tokenizer.json\n",
        a.out.c_str(), e.architecture.c_str(), (long long)e.tensors, (long long)e.bytes,
        a.dtype.c_str(), (long long)e.shards, e.shards > 1 ? "s (and an index)" : "");
    return 0;
  }
  for (const char* flag : {"--dtype", "--shard-mb"})
    if (cmd.get_option(flag)->count() > 0)
      throw CLI::ValidationError(flag, "goes with --format hf");
  const CheckpointReader ckpt(a.checkpoint);
  const auto tensors = ckpt.read_all(a.part);
  LOOM_CHECK(!tensors.empty()) << "ckpt export: " << a.checkpoint << " has no tensors under '"
                               << a.part << "/'";
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += int64_t(t.nbytes());
  save_safetensors(a.out, tensors, {{"loom_checkpoint", a.checkpoint}, {"part", a.part}});
  std::printf("%s: %zu tensors, %lld bytes (%s of %s)\n", a.out.c_str(), tensors.size(),
              (long long)bytes, a.part.c_str(), a.checkpoint.c_str());
  return 0;
}

void add_ckpt_verify(CLI::App& cmd, std::string& checkpoint) {
  cmd.description(
      "check a checkpoint as resuming would: manifest and its checksum, every tensor the run's "
      "model needs in its shape, every piece against its checksum");
  cmd.add_option("CHECKPOINT_DIR", checkpoint, kCheckpointHelp)->required();
}

int ckpt_verify_command(const std::string& checkpoint) {
  const std::string dir = checkpoint_from_user_path(checkpoint);
  // Exactly what resuming checks: the manifest and its checksum, trainer_state.json, every
  // tensor the run's model needs in its shape, and every piece against its checksum.
  train::verify_checkpoint(dir);
  std::printf("%s: %zu tensors, every checksum matches and resume has all it needs\n", dir.c_str(),
              CheckpointReader(dir).names("").size());
  return 0;
}

}  // namespace

void add_ckpt_commands(CLI::App& loom, int& code) {
  CLI::App* ckpt = loom.add_subcommand("ckpt")->require_subcommand(1);
  auto export_args = std::make_shared<CkptExportArgs>();
  CLI::App* export_cmd = ckpt->add_subcommand("export");
  add_ckpt_export(*export_cmd, *export_args);
  export_cmd->callback(
      [export_args, export_cmd, &code] { code = ckpt_export_command(*export_cmd, *export_args); });
  auto verify_args = std::make_shared<std::string>();
  CLI::App* verify_cmd = ckpt->add_subcommand("verify");
  add_ckpt_verify(*verify_cmd, *verify_args);
  verify_cmd->callback([verify_args, &code] { code = ckpt_verify_command(*verify_args); });
}

}  // namespace loom::cli
