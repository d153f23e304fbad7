// adaLN (differentiable): the conditioning's shift and scale applied per sample, alone or fused
// with the LayerNorm before it, and its gate on the residual branch.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// x (B, T, C), shift (B, C), scale (B, C) -> x * (1 + scale) + shift, broadcast over T.
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);

// modulate(layer_norm(x) without affine parameters, shift, scale) as one op (DiT's adaLN): one
// pass forward and one backward, and only x and the row statistics (f32) are kept.
Tensor layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps);

// x + gate * h with x, h (B, T, C) and gate (B, C) broadcast over T (the adaLN-Zero gate on a
// residual branch), as one op: one pass forward, and one for the gradients of h and gate.
Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& h);

}  // namespace loom
