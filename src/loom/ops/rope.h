// Rotary position embedding (differentiable).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// x (B, H, T, D) with even D; positions (T) i64 are global token positions (so a sequence
// shard of context parallelism passes its own offsets). Rotate-half pairing (i, i + D/2)
// with angle positions[t] * theta^(-2i/D).
Tensor rope(const Tensor& x, const Tensor& positions, double theta = 10000.0);

}  // namespace loom
