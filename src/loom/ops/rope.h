// Rotary position embedding (differentiable).
#pragma once
#include "loom/backend/rope_scaling.h"
#include "loom/core/tensor.h"

namespace loom {

// x (B, H, T, D) with even D; positions (T) i64 are global token positions (so a sequence
// shard of context parallelism passes its own offsets). Rotate-half pairing (i, i + D/2)
// with angle positions[t] * theta^(-2i/D), the frequency scaled as Llama 3.x's (rope_scaling.h)
// when `scaling` says so.
Tensor rope(const Tensor& x, const Tensor& positions, double theta = 10000.0,
            const RopeScaling& scaling = {});

}  // namespace loom
