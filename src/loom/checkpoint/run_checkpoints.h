// The run directory's checkpoints: runs/<name>/step-000100/ holding a sharded checkpoint (see
// checkpoint/sharded.h: one safetensors file per rank, manifest.json) and trainer_state.json,
// written under a temporary name and renamed into place, with a `latest` file naming the
// newest complete one. The ranks must share the run directory's file system.
#pragma once
#include <string>
#include <vector>

#include "loom/checkpoint/sharded.h"
#include "loom/core/json.h"
#include "loom/dist/process_group.h"

namespace loom {

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

}  // namespace loom
