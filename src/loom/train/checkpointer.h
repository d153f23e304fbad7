// A run's checkpoints as the trainer writes and reads them: the pieces this rank holds of the
// model ("model/<name>"), of the AdamW moments ("optimizer/<name>.exp_avg", ".exp_avg_sq") and
// of each recipe state ("ema/<name>"), laid out by the ParallelModel so that any layout reads
// any other, plus trainer_state.json (see checkpoint_dir.h for the directory itself).
//
// Under DiLoCo every worker has its own model, moments and recipe state between outer steps:
// worker 0's are written as above (what `loom sample` and `ckpt export` read), worker m's under
// "worker<m>/"; the outer state the workers share ("diloco_global/<name>", ...) is written by
// worker 0 and read by all, so a checkpoint taken at any step resumes exactly. Resumed with
// another worker count, worker m continues the checkpoint's worker m mod W (its weights,
// moments and recipe state; every worker the shared outer state).
#pragma once
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "loom/checkpoint/peer_store.h"
#include "loom/core/json.h"
#include "loom/dist/device_mesh.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/parallelize.h"

namespace loom::train {

// Per-piece tensors aligned with ParallelModel::pieces() under a name ("ema").
using PieceState = std::pair<std::string, std::vector<Tensor>>;

// Which DiLoCo worker this rank belongs to (of `workers`; 0: no DiLoCo), the per-piece state
// the workers share, and what to settle before a save (false) or a load (true).
struct WorkerLayout {
  int64_t workers = 0, worker = 0;
  std::function<std::vector<PieceState>()> shared;
  std::function<void(bool loading)> settle;
};

// One checkpointed quantity of every piece of the parallelised model, stored as
// "<prefix><param><suffix>": the model ("model/", ""), a moment ("optimizer/", ".exp_avg"), an
// EMA ("ema/", ""). values are aligned with ParallelModel::pieces(); empty: the pieces' own.
struct PieceValues {
  std::string prefix, suffix;
  std::vector<Tensor> values;
};

class Checkpointer {
 public:
  // extra: the recipe's per-piece state, asked for at every save and load. async: pieces are
  // copied and written by a background thread while training goes on (one checkpoint at a
  // time: the next save waits for the previous one). keep: checkpoints of this run kept.
  Checkpointer(const dist::DeviceMesh& mesh, parallel::ParallelModel& model,
               optim::AdamW& optimizer, std::function<std::vector<PieceState>()> extra,
               std::string model_kind, std::string run_dir, bool async, int64_t keep,
               WorkerLayout layout = {});
  ~Checkpointer();  // waits for a checkpoint being written

  // Collective: writes run_dir/step-<step> with `state` as trainer_state.json; returns the
  // directory the checkpoint has (or, while a background save runs, will have).
  std::string save(int64_t step, const Json& state);
  // Collective: reads this rank's pieces of everything saved and the optimizer's step count
  // from a checkpoint of any layout (of this model kind); returns its trainer_state.json.
  Json load(const std::string& ckpt_dir);
  // Blocks until a checkpoint being written is complete; rethrows its error.
  void wait();

  // In-memory checkpoints (resilience.memory_checkpoint_every, checkpoint/peer_store.h), kept
  // under root for the run. Collective.
  void keep_in_memory(const std::string& root, const std::string& run_id);
  bool in_memory() const { return bool(memory_); }
  // Collective: copies everything this rank holds now (the step waits for that copy only); the
  // buddy's copy and the files are made on a background thread.
  void save_to_memory(int64_t step, const Json& state);
  // Collective: restores everything from the newest step >= not_before of which every rank
  // finds an in-memory copy of its layout; returns its trainer_state.json, or null (saying
  // why) when there is none, or when refuse(its trainer_state.json) says why not (the same on
  // every rank); then nothing was loaded.
  Json load_from_memory(int64_t not_before,
                        const std::function<std::string(const Json&)>& refuse = {});
  // This rank's in-memory copies removed (a run trained to its end).
  void forget_memory();
  // Seconds the steps waited for in-memory copies, and how many were taken.
  double memory_seconds() const { return memory_seconds_; }
  int64_t memory_saves() const { return memory_saves_; }

 private:
  // What this rank writes (saving) or reads (loading: the shared state on every worker too).
  // What is saved or loaded; `worker`: whose per-worker state (DiLoCo; this rank's worker when
  // saving, the checkpoint's worker it continues when loading).
  std::vector<PieceValues> contents(bool saving, int64_t worker) const;
  // What this rank holds, in order (an in-memory copy's pieces), and the hash of their names,
  // ranges and dtypes with the world and the rank (the copy's layout).
  std::vector<std::pair<std::string, Tensor>> held_pieces() const;
  uint64_t memory_layout(const std::vector<std::pair<std::string, Tensor>>& pieces) const;
  void wait_memory();
  parallel::ParallelModel& model_;
  optim::AdamW& optimizer_;
  std::function<std::vector<PieceState>()> extra_;
  std::string model_kind_, run_dir_;
  bool async_;
  int64_t keep_;
  WorkerLayout layout_;
  // Checkpoint writing synchronises on a group of its own, so a background save never
  // interleaves its barriers with the training step's collectives.
  std::shared_ptr<dist::ProcessGroup> group_;
  std::thread saver_;
  std::exception_ptr save_error_;
  // In-memory copies: their own group (their background thread's transfers never interleave
  // with the step's or a disk save's), the store, the copying thread.
  std::shared_ptr<dist::ProcessGroup> memory_group_;
  std::unique_ptr<PeerStore> memory_;
  std::thread memory_saver_;
  std::exception_ptr memory_error_;
  double memory_seconds_ = 0;
  int64_t memory_saves_ = 0;
};

}  // namespace loom::train
