#include "loom/diffusion/flow_matching.h"

#include <algorithm>
#include <cmath>

#include "loom/ops/ops.h"

namespace loom::diffusion {

double shift_time(double t, double shift) {
  return shift * t / (1.0 + (shift - 1.0) * t);
}

FlowMatchingBatch flow_matching_batch(const Tensor& x0, const Tensor& labels,
                                      const FlowMatchingConfig& config, uint64_t seed, int64_t step,
                                      int64_t first_index) {
  const int64_t B = x0.size(0), per_sample = x0.numel() / B;
  const std::string s = std::to_string(step);
  Tensor eps = Tensor::empty(x0.shape(), DType::F32, x0.device());  // (B, C, H, W) noise
  fill_normal(eps, RngKey{seed, "flow.noise", s}, first_index * per_sample);
  // t (logit-normal or uniform) and label dropout: one draw per sample, at its global index.
  Tensor z = Tensor::empty({B});
  if (config.uniform_t)
    fill_uniform(z, RngKey{seed, "flow.t", s}, first_index);
  else
    fill_normal(z, RngKey{seed, "flow.t", s}, first_index, float(config.logit_normal_mean),
                float(config.logit_normal_std));
  Tensor u = Tensor::empty({B});
  fill_uniform(u, RngKey{seed, "flow.label_dropout", s}, first_index);
  std::vector<float> t = to_vector(z);
  if (!config.uniform_t)
    for (float& v : t) v = 1.0f / (1.0f + std::exp(-v));
  if (config.shift != 1.0)
    for (float& v : t) v = float(shift_time(v, config.shift));
  // A dropped sample's label (or every token of its caption) becomes the null class.
  std::vector<int64_t> y = to_vector_i64(labels);
  const std::vector<float> drop = to_vector(u);
  const int64_t per_label = labels.numel() / B;
  for (int64_t i = 0; i < B; ++i)
    if (drop[size_t(i)] < config.label_dropout)
      std::fill_n(y.begin() + i * per_label, per_label, config.null_class);
  Tensor tt = from_vector(t, {B}, DType::F32, x0.device());
  Tensor t4 = reshape(tt, {B, 1, 1, 1});  // broadcasts over C, H, W
  // x_t = x0 + t (eps - x0); target = eps - x0.
  Tensor target = sub(eps, x0);
  Tensor xt = add(x0, mul(t4, target));
  return {xt, tt, from_vector(y, labels.shape(), DType::I64, labels.device()), target};
}

Tensor flow_matching_loss(const VelocityFn& velocity, const Tensor& x0, const Tensor& labels,
                          const FlowMatchingConfig& config, uint64_t seed, int64_t step,
                          int64_t first_index) {
  const FlowMatchingBatch b = flow_matching_batch(x0, labels, config, seed, step, first_index);
  return mse(velocity(b.xt, b.t, b.labels), b.target);  // scalar ()
}

Tensor sample(const VelocityFn& velocity, const Shape& shape, const Tensor& labels,
              const SamplerConfig& config, uint64_t seed) {
  LOOM_CHECK(config.steps > 0) << "sample: steps must be positive, got " << config.steps;
  LOOM_CHECK(config.shift > 0) << "sample: the time shift must be positive, got " << config.shift;
  NoGradGuard no_grad;
  const int64_t B = shape[0];
  const Device device = labels.device();  // the model's: sampling runs where it trained
  Tensor x = randn(shape, RngKey{seed, "sample.noise", ""}, DType::F32, device);  // (B, C, H, W)
  const bool guided = config.cfg_scale != 1.0;
  Tensor null_labels = full(labels.shape(), double(config.null_class), DType::I64, device);
  auto v_at = [&](const Tensor& xt, double t) {
    if (!guided) return velocity(xt, full({B}, t, DType::F32, device), labels);
    // Conditional and unconditional predictions in one batch of 2B.
    Tensor v2 = velocity(cat({xt, xt}, 0), full({2 * B}, t, DType::F32, device),
                         cat({labels, null_labels}, 0));
    Tensor vc = narrow(v2, 0, 0, B), vu = narrow(v2, 0, B, B);  // (B, C, H, W) each
    return add(vu, mul_scalar(sub(vc, vu), config.cfg_scale));
  };
  auto time = [&](int64_t i) {
    return i == config.steps ? 0.0
                             : shift_time(1.0 - double(i) / double(config.steps), config.shift);
  };
  for (int64_t i = 0; i < config.steps; ++i) {
    const double t = time(i), t_next = time(i + 1), dt = t - t_next;
    Tensor v = v_at(x, t);
    Tensor x_euler = sub(x, mul_scalar(v, dt));
    if (config.heun && t_next > 0) {
      Tensor v2 = v_at(x_euler, t_next);
      x = sub(x, mul_scalar(add(v, v2), 0.5 * dt));
    } else {
      x = x_euler;
    }
  }
  return x;
}

}  // namespace loom::diffusion
