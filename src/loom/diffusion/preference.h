// Diffusion-DPO (Wallace et al. 2024, "Diffusion Model Alignment Using Direct Preference
// Optimization") for flow matching: of a preferred and a rejected image for one caption, the
// trained model should denoise the preferred one better, relative to a frozen reference model,
// than the rejected one. Each error is the flow-matching velocity's squared error at the same
// time and noise for both images (the paper's epsilon error, here the velocity's).
#pragma once
#include "loom/diffusion/flow_matching.h"

namespace loom::diffusion {

// The per-pair loss -log sigmoid(-beta (d_model - d_reference)), averaged over the pairs, where
// d = err(winner) - err(loser) and err is a sample's mean squared velocity error.
// winners, losers (B, C, H, W); labels (B) or (B, L). The draws (t, noise, dropped labels) are
// flow_matching_batch's at (seed, step, first_index), the same for a pair's two images. The
// reference runs without a graph.
Tensor diffusion_dpo_loss(const VelocityFn& model, const VelocityFn& reference,
                          const Tensor& winners, const Tensor& losers, const Tensor& labels,
                          const FlowMatchingConfig& config, double beta, uint64_t seed,
                          int64_t step, int64_t first_index = 0);

}  // namespace loom::diffusion
