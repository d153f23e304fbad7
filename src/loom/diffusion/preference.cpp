#include "loom/diffusion/preference.h"

#include "loom/ops/ops.h"

namespace loom::diffusion {

namespace {

// Each sample's mean squared error: (2B, C, H, W) -> (2B).
Tensor per_sample_mse(const Tensor& prediction, const Tensor& target) {
  const Tensor d = sub(prediction, target);
  return mean(reshape(mul(d, d), {d.size(0), d.numel() / d.size(0)}), {1});
}

}  // namespace

Tensor diffusion_dpo_loss(const VelocityFn& model, const VelocityFn& reference,
                          const Tensor& winners, const Tensor& losers, const Tensor& labels,
                          const FlowMatchingConfig& config, double beta, uint64_t seed,
                          int64_t step, int64_t first_index) {
  LOOM_CHECK(winners.shape() == losers.shape() && winners.dim() == 4)
      << "diffusion-dpo: winners " << winners.shape() << " and losers " << losers.shape()
      << " must be images of one shape (B, C, H, W)";
  const int64_t B = winners.size(0);
  // Keyed by index: a pair's winner and loser get the same time, noise and dropped caption.
  const FlowMatchingBatch w = flow_matching_batch(winners, labels, config, seed, step, first_index);
  const FlowMatchingBatch l = flow_matching_batch(losers, labels, config, seed, step, first_index);
  const Tensor xt = cat({w.xt, l.xt}, 0), t = cat({w.t, l.t}, 0);  // winners, then losers
  const Tensor y = cat({w.labels, l.labels}, 0), target = cat({w.target, l.target}, 0);
  Tensor reference_error;
  {
    NoGradGuard frozen;
    reference_error = per_sample_mse(reference(xt, t, y), target);  // (2B)
  }
  // How much better than the reference the model denoises each image: (2B).
  const Tensor gain = sub(per_sample_mse(model(xt, t, y), target), reference_error);
  const Tensor margin = sub(narrow(gain, 0, 0, B), narrow(gain, 0, B, B));  // (B)
  // -log sigmoid(-beta margin) = softplus(beta margin).
  return mean(softplus(mul_scalar(margin, beta)));
}

}  // namespace loom::diffusion
