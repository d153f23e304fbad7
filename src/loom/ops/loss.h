// Losses (differentiable), returning f32 scalars.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// Mean over non-ignored positions of -log softmax(logits)[target]. logits (..., V), targets
// (...) i64. Fused: the log-softmax is never materialised, and its backward is computed in
// place of the logits' gradient. Throws if a target is outside [0, V) and not ignore_index.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// Mean of (pred - target)^2 over all elements.
Tensor mse(const Tensor& pred, const Tensor& target);

}  // namespace loom
