// Softmax and log-softmax over the last dim (differentiable), computed in f32.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);

}  // namespace loom
