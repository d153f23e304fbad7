// The run directory's checkpoints: runs/<name>/step-000100/ holding a sharded checkpoint (see
// checkpoint/sharded.h: one safetensors file per rank, manifest.json) and trainer_state.json,
// written under a temporary name and renamed into place, with a `latest` file naming the
// newest complete one. The ranks must share the run directory's file system.
#pragma once
#include <string>
#include <vector>

#include "loom/checkpoint/json.h"
#include "loom/checkpoint/sharded.h"
#include "loom/dist/process_group.h"
#include "loom/train/config.h"

namespace loom::train {

// Collective over `world`: every rank writes its pieces, rank 0 the manifest and
// trainer_state.json (which must hold "run_id"); then step-<step>/ appears atomically, `latest`
// names it and of this run's checkpoints (by the run id and step inside them, never by name)
// only the newest `keep` up to this step stay. Another run's checkpoints are never touched.
// Returns the directory.
std::string save_checkpoint(const std::string& run_dir, int64_t step, dist::ProcessGroup& world,
                            const std::vector<TensorPiece>& pieces, const Json& state,
                            int64_t keep);
// One step-* directory of a run directory, as its trainer_state.json describes it.
struct CheckpointInfo {
  std::string dir;
  int64_t step = -1;      // the step recorded inside (from the name if unreadable)
  std::string run_id;     // the run that wrote it
  bool readable = false;  // trainer_state.json could be read
};
// Every complete step-* directory of run_dir, ordered by step (oldest first).
std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir);

// run_dir/step-000100 for step 100.
std::string checkpoint_dir_name(const std::string& run_dir, int64_t step);
// The directory named by run_dir/latest, or "" if there is none.
std::string latest_checkpoint(const std::string& run_dir);
// What a user names as a checkpoint: a checkpoint directory as it is, or a run directory
// (one holding `latest`) as the checkpoint its `latest` names; fails clearly if that is gone.
std::string checkpoint_from_user_path(const std::string& path);
// trainer_state.json of a checkpoint (checked against its manifest).
Json read_trainer_state(const CheckpointReader& ckpt);

// "dit", "gpt", ...: the model kind in a checkpoint's trainer_state.json.
std::string checkpoint_model_kind(const std::string& ckpt_dir);
// The config of the run a checkpoint belongs to (config.toml beside it), after checking that
// the checkpoint is of model kind `kind` ("": any); `what` names the command in errors.
Config run_config_of(const std::string& ckpt_dir, const std::string& kind, const char* what);

// Reads every tensor and file of a checkpoint, checking each against the manifest; throws
// naming what is damaged (a truncated or corrupted file, a missing one).
void verify_checkpoint(const std::string& dir);

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
