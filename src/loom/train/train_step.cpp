#include "loom/train/train_step.h"

#include "loom/autograd/engine.h"
#include "loom/core/trace.h"
#include "loom/ops/ops.h"

namespace loom::train {

double TrainStep::forward_backward(const std::function<Tensor(int64_t micro)>& micro_loss,
                                   const std::function<Tensor(const Tensor&)>& guard) {
  AutocastGuard autocast(compute_);
  const int64_t A = grad_accum_;
  double loss_sum = 0;
  for (int64_t micro = 0; micro < A; ++micro) {
    Tensor loss = micro_loss(micro);
    if (A > 1) loss = mul_scalar(loss, 1.0 / double(A));
    loss = guard(loss);
    model_.begin_micro_step(micro, A);
    backward(loss);
    model_.after_backward(micro, A);
    loss_sum += double(item(loss));
  }
  return loss_sum;
}

double TrainStep::forward_backward(const parallel::PipelineStages& stages) {
  AutocastGuard autocast(compute_);
  return model_.run_pipeline_step(stages);
}

double TrainStep::grad_norm() {
  trace::Scope scope("grad_norm", "optimizer");
  return model_.grad_norm();
}

void TrainStep::update(double lr, double grad_norm) {
  trace::Scope scope("optimizer_step", "optimizer");
  optimizer_.step(lr, optim::clip_scale(grad_norm, grad_clip_));  // clipped in the update
  model_.sync_parameters();
}

}  // namespace loom::train
