// DiLoCo (Douillard et al. 2023): M workers each take H inner optimizer steps on their own data
// with no communication between them; then the pseudo-gradients (the global weights minus each
// worker's) are averaged over the workers and applied to the global weights by an outer
// optimizer (SGD with Nesterov momentum), and every worker continues from the new global
// weights. A worker is one dp_replicate group of the mesh (inside it, DDP or ZeRO over
// dp_shard as usual), so the outer exchange runs between the ranks that hold the same pieces
// in each worker: every rank averages its own pieces, whatever the layout inside a worker.
//
// On the wire the pseudo-gradients are f32 (an all-reduce), or int8 / int4 blocks
// (lowcomm/quantize.h) exchanged in two phases like a ring all-reduce's: every worker sends
// each member its share of the blocks, the member averages its share and sends the compressed
// average to all. With error feedback, what each quantisation lost is added to the next outer
// step's values (the worker's for its contribution, the member's for its average).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
};

struct OuterStep {
  int64_t bytes_sent = 0;  // by this rank to the other workers
  double seconds = 0;      // of the whole outer step (exchange and update)
  double delta_norm = 0;   // of this rank's averaged pseudo-gradient
};

class DiLoCo {
 public:
  // Collective over `workers`: the global weights start as worker 0's.
  DiLoCo(parallel::ParallelModel& model, std::shared_ptr<dist::ProcessGroup> workers,
         const DiLoCoConfig& config);
  const DiLoCoConfig& config() const { return config_; }
  bool due(int64_t step) const { return (step + 1) % config_.inner_steps == 0; }
  // Collective over the workers: the outer step; every worker ends with the new global weights.
  OuterStep sync();
  // Checkpointed per-piece state, aligned with the model's pieces: the same on every worker
  // (global weights, outer momentum), and this worker's own (the error-feedback residuals).
  using PieceState = std::pair<std::string, std::vector<Tensor>>;
  std::vector<PieceState> shared_state() const;
  std::vector<PieceState> worker_state() const;

 private:
  void average(std::vector<float>& delta);  // over the workers, in place
  void compressed_average(std::vector<float>& delta);
  std::vector<Tensor> views_of(const Tensor& flat) const;  // one per piece, its shape

  parallel::ParallelModel& model_;
  std::shared_ptr<dist::ProcessGroup> workers_;
  DiLoCoConfig config_;
  int64_t numel_ = 0;
  Tensor global_, momentum_, error_, owner_error_;  // flat over this rank's pieces
};

}  // namespace loom::lowcomm
