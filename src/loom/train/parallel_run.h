// How a training run is spread over the job's processes: the device mesh, this rank's place
// on the data-parallel axes, and the data-parallel strategy applied to the model's parameters
// (DDP, or ZeRO-1/2 sharding, optionally hybrid with replicas).
//
// The trainers stay written for one process: they get their optimizer and their share of the
// global batch from this object, call its hooks around backward and the optimizer step, and
// let only the main rank write files.
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/ddp.h"
#include "loom/parallel/zero.h"
#include "loom/train/config.h"

namespace loom::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class ParallelRun {
 public:
  // Collective over the world: builds the mesh from [parallel]; checks that train.batch_size
  // splits evenly over the data-parallel ranks.
  explicit ParallelRun(const Config& cfg);

  bool main() const { return main_; }  // world rank 0: console, metrics, checkpoints, samples
  int64_t dp_rank() const { return dp_rank_; }
  int64_t dp_size() const { return dp_size_; }
  int64_t local_batch() const { return local_batch_; }  // this rank's share of a micro-batch
  const dist::DeviceMesh& mesh() const { return mesh_; }
  std::string describe() const;  // "4 processes (dp 4: zero2)"

  // Applies the data-parallel strategy to the parameters (block_names: the model's blocks,
  // ZeRO's flat groups), makes every replica equal to rank 0's, and returns the optimizer the
  // trainer steps: AdamW over all parameters, or over this rank's ZeRO shard.
  optim::AdamW& setup(const std::vector<nn::NamedParameter>& params,
                      const std::vector<std::string>& block_names, const optim::AdamWConfig& adamw);

  // Around each micro-step's backward: gradients are exchanged as the strategy says.
  void begin_micro_step(int64_t micro, int64_t grad_accum);
  void after_backward(int64_t micro, int64_t grad_accum);
  // Global gradient norm (before clipping to max_norm, if > 0).
  double clip_grad_norm(double max_norm);
  void after_optimizer_step();
  void zero_grad();
  // Optimizer state in the single-process layout (collective under ZeRO), and its inverse.
  NamedTensors optimizer_state();
  void load_optimizer_state(const std::map<std::string, Tensor>& state, const std::string& source);

  // Element-wise sum over the dp ranks (for losses and flags; f32 on the wire).
  std::vector<double> sum_over_dp(const std::vector<double>& values) const;

 private:
  const Config& cfg_;
  dist::DeviceMesh mesh_;
  std::shared_ptr<dist::ProcessGroup> dp_;
  int64_t dp_rank_, dp_size_, local_batch_;
  bool main_;
  std::vector<nn::NamedParameter> params_;
  std::unique_ptr<optim::AdamW> adamw_;  // 1 rank and ddp
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<parallel::ZeroDataParallel> zero_;
};

}  // namespace loom::train
