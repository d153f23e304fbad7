// One optimizer step of a parallelised model, as the trainer takes it (train/trainer.cpp) and
// `loom bench` times it: the micro-batches' forward and backward under the compute dtype's
// autocast (the handle exchanging gradients around each backward, or the pipeline schedule
// over them), the one global gradient norm, and the AdamW update with the clipping folded in.
// What lies between (agreeing on the loss, skipping a bad step, DiLoCo, a mixture's biases)
// is the trainer's.
#pragma once
#include <cstdint>
#include <functional>

#include "loom/core/dtype.h"
#include "loom/core/tensor.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/parallelize.h"

namespace loom::train {

class TrainStep {
 public:
  TrainStep(parallel::ParallelModel& model, optim::AdamW& optimizer, DType compute,
            int64_t grad_accum, double grad_clip)
      : model_(model),
        optimizer_(optimizer),
        compute_(compute),
        grad_accum_(grad_accum),
        grad_clip_(grad_clip) {}

  // Each micro-batch m's mean loss, micro_loss(m), scaled by 1 / grad_accum and through
  // `guard` (a test's poisoned loss), then backward; gradients accumulate to the mean. Returns
  // this rank's loss.
  double forward_backward(const std::function<Tensor(int64_t micro)>& micro_loss,
                          const std::function<Tensor(const Tensor&)>& guard);
  // Under a pipeline: its schedule over the step's micro-batches (stages.loss already
  // guarded). Returns the step's mean loss, on every rank.
  double forward_backward(const parallel::PipelineStages& stages);
  double grad_norm();  // over every parameter's whole gradient
  // AdamW at learning rate `lr`, clipping a gradient of this norm to train.grad_clip; the full
  // parameters follow the updated pieces.
  void update(double lr, double grad_norm);
  void zero_grad() { model_.zero_grad(); }

 private:
  parallel::ParallelModel& model_;
  optim::AdamW& optimizer_;
  const DType compute_;
  const int64_t grad_accum_;
  const double grad_clip_;
};

}  // namespace loom::train
