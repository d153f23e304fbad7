// What keeps a run going through bad steps and tells about slow ranks ([resilience]):
//  - a step whose loss or gradient norm is not finite is skipped: no update, counted in the
//    metrics ("skipped_steps") and events.jsonl. Both values are agreed over the ranks (the
//    loss is summed over them, the norm is global), so every rank skips the same steps (under
//    DiLoCo: every rank of a worker; workers decide alone, and a rollback waits for the
//    workers to agree on it at the end of an outer round, trainer.cpp's RoundAgreement).
//  - after max_skips_in_row skipped steps in a row the run rolls back: the weights, AdamW
//    state and EMA of the newest valid checkpoint come back, and training goes on from the
//    next step's data -- the data from the checkpoint to here is skipped (the way large runs
//    step past a loss blow-up). More than max_rollbacks rollbacks stop the run with an error.
//  - a loss more than spike_zscore standard deviations above the last 50 steps' is logged;
//    with skip_spikes the step is treated as a non-finite one; with spike_rollback too, the run
//    then rolls back to the newest valid checkpoint and replays the steps from it with their
//    own data, skipping the spike's batch when it comes again (a rollback: max_rollbacks).
//  - every straggler_every steps the ranks compare their compute time per step (wall time less
//    waits on collectives and on data: a slow rank makes the others wait, so wall times are
//    equal); a rank above straggler_factor x the median of the other ranks is flagged, with
//    its host, on the console and in events.jsonl. The times are gathered without waiting and
//    compared at the next comparison's step (or the run's end): a report comes one period late.
//    A rank flagged exclude_stragglers_after times in a row is excluded: every rank reaches
//    that decision from the same gathered times; the run checkpoints, logs an `exclude` event
//    with the flags as evidence and exits with kExitExcluded, and `loom launch --min-ranks`
//    restarts it without that rank.
//  - every consistency_every steps, and before every checkpoint, the ranks that hold the same
//    weights (data-parallel replicas; a tensor-parallel group for the parameters it does not
//    split) compare a hash of them and of their AdamW moments; a mismatch (silent data
//    corruption) names the ranks that differ from the majority and stops the run before the
//    bad state is checkpointed.
//  - as a step begins (at most once a second) the rank writes its heartbeat,
//    run_dir/logs/heartbeat-rank-R, which `loom launch --hang-timeout` watches.
//  - LOOM_FAULT faults (train/fault.h) fire at their steps.
#pragma once
#include <chrono>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/device_mesh.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/parallelize.h"
#include "loom/train/checkpointer.h"
#include "loom/train/config.h"
#include "loom/train/fault.h"

namespace loom::train {

class StepGuard {
 public:
  // Collective over the world (the ranks exchange their host names).
  StepGuard(const Config& cfg, const dist::DeviceMesh& mesh, const parallel::ParallelModel& model,
            const optim::AdamW& optimizer, Checkpointer& checkpointer, std::string run_dir);

  // One step under the guard (step: its 0-based index): the heartbeat and test faults before
  // it, the straggler comparison after it (collective every straggler_every steps; data_wait():
  // the seconds the run has waited for data so far). Returns what train_step() returns.
  template <typename Step, typename DataWait>
  auto run_step(int64_t step, Step&& train_step, DataWait&& data_wait) {
    begin_step(step);
    auto result = train_step();
    end_step(step, data_wait());
    return result;
  }
  // The checkpoint of `step` (0-based, completed) under the guard: the replicas agree first,
  // the checkpoint test faults follow. save() writes it and returns its directory.
  template <typename Save>
  std::string checkpoint(int64_t step, Save&& save) {
    before_checkpoint(step);
    const std::string dir = save();
    after_checkpoint(dir, step + 1);
    return dir;
  }
  Tensor guard_loss(const Tensor& loss, int64_t step) const;  // the nan fault
  // After the gradients are reduced: whether to apply the update (else: skip and count).
  bool accept(int64_t step, double loss, double grad_norm);
  // After a skipped step: whether too many came in a row, and the rollback itself (collective:
  // everything the checkpointer saves comes back).
  bool needs_rollback() const { return in_row_ >= rc_.max_skips_in_row; }
  Json roll_back(int64_t step);  // returns the loaded checkpoint's trainer_state.json
  // A loss spike under spike_rollback: the 0-based step whose batch a replay skips, else -1.
  int64_t spike_to_replay() const { return spike_step_; }
  // The replay's rollback: resume(checkpoint) loads the newest valid checkpoint, moves the data
  // to it and returns its step. Logs a `rollback` event; returns the checkpoint's step.
  int64_t replay(const std::function<int64_t(const std::string&)>& resume);
  void finish() { report_stragglers(); }  // after the last step: the last comparison

  int64_t skipped() const { return skipped_; }
  // Collective over the world, after every step: whether any rank noted a preemption signal.
  bool preempted();
  bool preemption_noted() const;  // this rank's part of it (no communication)
  // After the checkpoint of `step` (1-based, completed) was started: waits for it, logs the
  // `preempted` event and throws Preempted (main exits with kExitPreempted).
  [[noreturn]] void finish_preempted(int64_t step);
  // A rank flagged as a straggler exclude_stragglers_after comparisons in a row (the same on
  // every rank), else -1.
  int excluded_rank() const { return excluded_rank_; }
  // After the checkpoint of `step` (1-based) was started: waits for it, logs the `exclude`
  // event and throws Excluded (main exits with kExitExcluded).
  [[noreturn]] void finish_excluded(int64_t step);

 private:
  void begin_step(int64_t step);
  void end_step(int64_t step, double data_wait);
  void before_checkpoint(int64_t step);                         // the replicas must agree
  void after_checkpoint(const std::string& dir, int64_t step);  // corrupt/truncate faults

  const ResilienceConfig& rc_;
  const dist::DeviceMesh& mesh_;
  const parallel::ParallelModel& model_;
  const optim::AdamW& optimizer_;
  Checkpointer& checkpointer_;
  bool main_;
  std::string run_dir_, run_id_;
  FaultPlan faults_;
  std::vector<std::string> hosts_;    // by world rank
  void check_replicas(int64_t step);  // collective over the replicas and the tp group
  // Collective over group: stops the run (a replica_mismatch event) when the members' hashes h
  // differ, naming those apart from the majority.
  void compare_hashes(dist::ProcessGroup& group, int64_t h, int64_t step, const char* what);
  static std::vector<int64_t> gather_i64(dist::ProcessGroup& group, int64_t value);
  bool skip(int64_t step, double loss, double grad_norm, const char* why);
  int64_t skipped_ = 0, in_row_ = 0, checked_step_ = -1, rollbacks_ = 0;
  std::deque<double> recent_losses_;
  int64_t spike_step_ = -1;         // a spike to replay past
  std::set<int64_t> replay_skips_;  // steps whose batch is skipped (spikes before a replay)
  std::string heartbeat_path_;
  std::chrono::steady_clock::time_point step_start_, last_beat_{};
  double waited_at_start_ = 0, data_at_start_ = 0;
  double compute_s_ = 0;  // this rank's compute seconds since the last comparison
  int64_t compute_steps_ = 0;
  // The comparison on its way: every rank's time per step over steps times_steps_ (1-based).
  Tensor times_in_, times_;
  dist::WorkPtr times_work_;
  std::pair<int64_t, int64_t> times_steps_;
  void report_stragglers();  // waits for the comparison on its way, if any, and reports it
  // By world rank: the flags of the comparisons in a row that flagged it (the evidence).
  std::vector<std::vector<Json>> flags_in_row_;
  int excluded_rank_ = -1;
};

}  // namespace loom::train
