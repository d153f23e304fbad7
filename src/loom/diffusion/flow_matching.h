// Rectified flow / flow matching: x_t = (1 - t) x0 + t eps, the model predicts the velocity
// eps - x0; t = 0 is data, t = 1 is noise. Every random draw is keyed by (seed, purpose,
// step) and the sample's global index, so a batch split over ranks draws the same numbers.
#pragma once
#include <functional>

#include "loom/core/tensor.h"

namespace loom::diffusion {

// velocity(x_t (B, C, H, W), t (B) f32, labels (B) i64) -> (B, C, H, W). The labels may be
// (B, L) instead (a caption's tokens): a dropped or unconditional one is L null classes.
using VelocityFn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;

// The timestep shift of SD3 (Esser et al. 2024): t -> s t / (1 + (s - 1) t), a monotone map of
// [0, 1] onto itself that, for s > 1, moves times toward the noise end (t = 1), where a larger
// image keeps more of its signal at a given t. s = 1 is the identity.
double shift_time(double t, double shift);

struct FlowMatchingConfig {
  double label_dropout = 0.1;  // probability of replacing a label with the null class
  int64_t null_class = 10;
  // The training times: logit-normal, t = sigmoid(N(mean, std)), which puts most of them in
  // the middle where the velocity is hardest to predict; or uniform on [0, 1].
  bool uniform_t = false;
  double logit_normal_mean = 0.0, logit_normal_std = 1.0;
  double shift = 1.0;  // the times drawn, then shifted (shift_time); sample with the same
};

// One (micro-)batch's training example: the model's inputs and the velocity it should predict.
struct FlowMatchingBatch {
  Tensor xt, t, labels;  // (B, C, H, W), (B) f32, (B) or (B, L) i64 (some dropped: null)
  Tensor target;         // eps - x0
};
// first_index: global index of x0's first sample within the step's global batch.
FlowMatchingBatch flow_matching_batch(const Tensor& x0, const Tensor& labels,
                                      const FlowMatchingConfig& config, uint64_t seed, int64_t step,
                                      int64_t first_index = 0);

// Mean squared error between predicted and target velocity for one (micro-)batch.
Tensor flow_matching_loss(const VelocityFn& velocity, const Tensor& x0, const Tensor& labels,
                          const FlowMatchingConfig& config, uint64_t seed, int64_t step,
                          int64_t first_index = 0);

struct SamplerConfig {
  int64_t steps = 50;
  bool heun = false;       // second-order (Heun) instead of Euler
  double cfg_scale = 1.0;  // 1 = no guidance
  int64_t null_class = 10;
  double shift = 1.0;  // the model's training shift: the time grid is shift_time of a uniform one
};

// Integrates dx/dt = v from t = 1 (noise keyed by seed) to t = 0 over the times
// shift_time(1 - i / steps), i = 0..steps; with guidance the velocity is
// v_uncond + cfg_scale (v_cond - v_uncond). Heun corrects every step but the last (to t = 0,
// where it would evaluate the model at pure data). labels (B) or (B, L) i64.
Tensor sample(const VelocityFn& velocity, const Shape& shape, const Tensor& labels,
              const SamplerConfig& config, uint64_t seed);

}  // namespace loom::diffusion
