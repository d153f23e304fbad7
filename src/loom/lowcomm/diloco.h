// DiLoCo (Douillard et al. 2023): M workers each take H inner optimizer steps on their own data
// with no communication between them; then the pseudo-gradients (the global weights minus each
// worker's) are averaged over the workers and applied to the global weights by an outer
// optimizer (SGD with Nesterov momentum), and every worker continues from the new global
// weights. A worker is one dp_replicate group of the mesh (inside it, DDP or ZeRO over
// dp_shard as usual), so the outer exchange runs between the ranks that hold the same pieces
// in each worker: every rank averages its own pieces, whatever the layout inside a worker.
//
// Streaming DiLoCo (Douillard et al. 2025): the weights split into F fragments (runs of
// consecutive parameters: groups of blocks) whose exchanges are staggered by H / F steps, so
// only 1 / F of the model is on the wire at a time. With overlap_steps tau > 0 a fragment's
// exchange runs in the background while the next tau inner steps train on; its outer update is
// applied tau steps late and merged into the worker's weights: local = mixing * local +
// (1 - mixing) * global (0: replaced, plain DiLoCo).
//
// On the wire the pseudo-gradients are f32 (an all-reduce), or int8 / int4 blocks
// (lowcomm/quantize.h) exchanged in two phases like a ring all-reduce's: every worker sends
// each member its share of the blocks, the member averages its share and sends the compressed
// average to all. With error feedback, what each quantisation lost is added to the next outer
// step's values (the worker's for its contribution, the member's for its average). Two workers
// send each other their whole codes instead, in one phase: the same bytes, one crossing of the
// link instead of two, one quantisation (the member's residuals stay zero).
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loom/core/json.h"
#include "loom/dist/process_group.h"
#include "loom/lowcomm/quantize.h"
#include "loom/parallel/parallelize.h"

namespace loom::lowcomm {

struct DiLoCoConfig {
  int64_t workers = 1;
  int64_t inner_steps = 50;  // H
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  QuantConfig quant{Compression::None, 128, DType::F32};  // None: f32 pseudo-gradients
  bool error_feedback = true;                             // compressed only
  int64_t fragments = 1;                                  // F; H must be a multiple
  int64_t overlap_steps = 0;  // tau < H / F: one fragment on the wire at a time
  double mixing = 0;          // alpha, for the merge of a late outer update
  // The outer state (global weights, momentum, the average, error feedback) in host memory
  // instead of on the parameters' device: a GPU's memory for one transfer each way per outer
  // step.
  bool host_state = false;
};

// What the outer exchanges did in one step (several fragments may end together at the end).
struct OuterStep {
  int64_t bytes_sent = 0;  // by this rank to the other workers, for the fragments applied
  double seconds = 0;      // the step waited on the exchanges (blocked, not overlapped)
  double delta_norm = 0;   // of this rank's averaged pseudo-gradients applied
  int64_t fragments = 0;   // applied in this step
};

class DiLoCo {
 public:
  // Collective over `workers`: the global weights start as worker 0's.
  DiLoCo(parallel::ParallelModel& model, std::shared_ptr<dist::ProcessGroup> workers,
         const DiLoCoConfig& config);
  ~DiLoCo();  // waits for an exchange on the wire
  const DiLoCoConfig& config() const { return config_; }
  // After the optimizer step of `step` (0-based): starts the fragment whose turn it is and
  // applies the one whose overlap ended; at the last step of the run every fragment is
  // brought to the global weights. Collective over the workers. Nothing: no exchange ended.
  std::optional<OuterStep> after_step(int64_t step, bool last);
  // Before a checkpoint is written: the exchange on the wire completes (its average is state,
  // applied at its step as ever). Before one is loaded: it completes and is dropped (resume()
  // takes the checkpoint's instead).
  void settle(bool drop);
  // Checkpointed per-piece state, aligned with the model's pieces: the same on every worker
  // (global weights, outer momentum, an exchanged average not yet applied), and this worker's
  // own (the error-feedback residuals); and trainer_state.json fields (the one in flight).
  using PieceState = std::pair<std::string, std::vector<Tensor>>;
  std::vector<PieceState> shared_state() const;
  std::vector<PieceState> worker_state() const;
  Json state() const;
  void resume(const Json& trainer_state);

 private:
  struct Fragment {
    int64_t begin = 0, end = 0;  // in the flat buffers
    int64_t offset = 0;          // its exchanges start after steps t with (t + 1) % H == offset
  };
  void start(int f, int64_t step);       // the exchange of fragment f, on a thread
  OuterStep apply(int f, bool replace);  // waits for it, outer step, merge (or replace)
  void exchange(int f);                  // on the thread: average into result_
  // The averages over the workers of delta (a view of result_ at `begin`), in place: f32
  // all-reduce, compressed in two phases, or (two workers) in one.
  void average(const Tensor& delta);
  void compressed_average(const Tensor& delta, int64_t begin);
  void gathered_average(const Tensor& delta, int64_t begin);
  std::vector<Tensor> views_of(const Tensor& flat) const;  // one per piece, its shape
  void copy_pieces(bool to_pieces, const Tensor& flat, int64_t begin, int64_t end);

  parallel::ParallelModel& model_;
  std::shared_ptr<dist::ProcessGroup> workers_;
  DiLoCoConfig config_;
  int64_t numel_ = 0;
  Device device_ = cpu_device();  // of the outer state: the pieces', or the host's
  std::vector<Fragment> fragments_;
  // Flat over this rank's pieces, on device_: global weights, momentum, the pseudo-gradient
  // being exchanged and then its average (result), error-feedback residuals.
  Tensor global_, momentum_, result_, error_, owner_error_;
  int in_flight_ = -1;  // the fragment on the wire (-1: none), started after step started_at_
  int64_t started_at_ = -1;
  int64_t sent_ = 0;  // by the exchange in flight
  std::thread thread_;
  std::exception_ptr failed_;  // of the exchange thread
};

}  // namespace loom::lowcomm
