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

namespace loom::train {

// Collective over `world`: every rank writes its pieces, rank 0 the manifest and
// trainer_state.json; then step-<step>/ appears atomically, `latest` names it and only the
// newest `keep` checkpoints stay. Returns the directory.
std::string save_checkpoint(const std::string& run_dir, int64_t step, dist::ProcessGroup& world,
                            const std::vector<TensorPiece>& pieces, const Json& state,
                            int64_t keep);
// run_dir/step-000100 for step 100.
std::string checkpoint_dir_name(const std::string& run_dir, int64_t step);
// The directory named by run_dir/latest, or "" if there is none.
std::string latest_checkpoint(const std::string& run_dir);
// What a user names as a checkpoint: a checkpoint directory as it is, or a run directory
// (one holding `latest`) as the checkpoint its `latest` names; fails clearly if that is gone.
std::string checkpoint_from_user_path(const std::string& path);
// trainer_state.json of a checkpoint (checked against its manifest).
Json read_trainer_state(const CheckpointReader& ckpt);

// Reads every tensor and file of a checkpoint, checking each against the manifest; throws
// naming what is damaged (a truncated or corrupted file, a missing one).
void verify_checkpoint(const std::string& dir);

enum class Resume { No, Latest, Auto };
// Collective over `world`: the checkpoint to continue from ("" for none), the same on every
// rank. Latest: the one `latest` names (loading still checks what it reads). Auto: the newest
// that verify_checkpoint() passes (rank 0 reads it); each damaged one passed over is printed
// and logged to events.jsonl.
std::string resume_checkpoint(const std::string& run_dir, Resume mode, dist::ProcessGroup& world);

}  // namespace loom::train
