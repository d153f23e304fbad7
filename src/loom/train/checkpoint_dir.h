// What a run directory's checkpoints mean to training (their storage:
// checkpoint/run_checkpoints.h): which one a resume continues from, whether one holds all a resume
// needs, and the run config beside one.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "loom/checkpoint/run_checkpoints.h"
#include "loom/dist/process_group.h"
#include "loom/train/config.h"

namespace loom::train {

// "dit", "gpt", ...: the model kind in a checkpoint's trainer_state.json.
std::string checkpoint_model_kind(const std::string& ckpt_dir);
// The config of the run a checkpoint belongs to (config.toml beside it), after checking that
// the checkpoint is of model kind `kind` (none: any); `what` names the command in errors.
Config run_config_of(const std::string& ckpt_dir, std::optional<ModelKind> kind, const char* what);

// Reads every tensor and file of a checkpoint, checking each against the manifest; throws
// naming what is damaged (a truncated or corrupted file, a missing one).
void verify_checkpoint(const std::string& dir);

// What a command other than training may write (exports, samples, tokenizers, reports): never
// a file or folder inside a checkpoint (a folder with manifest.json or trainer_state.json),
// and never an existing entry of a run directory (config.toml, latest, metrics.jsonl, a
// checkpoint, ...: a folder with config.toml or `latest`). A new name beside them is fine.
// Throws naming `flag` and the path otherwise; nothing has been written then.
void check_output_path(const std::string& path, const char* flag);

enum class Resume { No, Latest, Auto };
// Rank 0 alone: the checkpoint of run `run_id` to continue from. Latest: the one `latest`
// names if it is this run's; without a usable `latest` (missing, dangling, garbage, another
// run's) the newest verified one, saying so. Auto: the newest that verify_checkpoint()
// passes. Each damaged one passed over is printed and logged to events.jsonl. "" when the
// run has no checkpoint at all; an error when it has some but none is usable.
std::string choose_resume_checkpoint(const std::string& run_dir, const std::string& run_id,
                                     Resume mode);
// Collective over `world`: the newest verified checkpoint of the run (rollbacks), the same on
// every rank, or "".
std::string newest_valid_checkpoint(const std::string& run_dir, const std::string& run_id,
                                    dist::ProcessGroup& world);

}  // namespace loom::train
