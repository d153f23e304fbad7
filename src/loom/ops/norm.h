// Normalisation over the last dim (differentiable), statistics always in f32.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// weight/bias (C) may be undefined (no affine part).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps = 1e-6f);

}  // namespace loom
