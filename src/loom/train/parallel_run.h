// How a training run is spread over the job's processes: the device mesh, this rank's place
// on the data-parallel axis, and the data-parallel wrapper of the model's parameters.
//
// The trainers stay written for one process: they ask this object for their share of the
// global batch, call finish_gradients() after backward, and let only the main rank write
// files and print.
#pragma once
#include <memory>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"
#include "loom/parallel/ddp.h"
#include "loom/train/config.h"

namespace loom::train {

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
  std::string describe() const;  // "2 processes (dp 2: ddp)"

  // Wraps the parameters for data parallelism and makes every replica equal to rank 0's.
  void attach(const std::vector<nn::NamedParameter>& params);
  // Before each micro-step's backward: gradients are only exchanged on the last one.
  void begin_micro_step(int64_t micro, int64_t grad_accum);
  // After the last backward of a step: gradients hold the average over the dp ranks.
  void finish_gradients();
  // Element-wise sum over the dp ranks (for losses and flags; f32 on the wire).
  std::vector<double> sum_over_dp(const std::vector<double>& values) const;

 private:
  dist::DeviceMesh mesh_;
  std::shared_ptr<dist::ProcessGroup> dp_;
  int64_t dp_rank_, dp_size_, local_batch_;
  bool main_;
  int64_t bucket_bytes_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
};

}  // namespace loom::train
