// adaLN modulation (differentiable): the conditioning's shift and scale applied per sample.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// x (B, T, C), shift (B, C), scale (B, C) -> x * (1 + scale) + shift, broadcast over T.
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);

}  // namespace loom
