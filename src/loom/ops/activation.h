// Activation functions (differentiable).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

Tensor gelu(const Tensor& x);     // tanh approximation (GPT-2, DiT)
Tensor silu(const Tensor& x);     // x * sigmoid(x)
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x)), as (1 + tanh(x / 2)) / 2
// log(1 + exp(x)), as relu(x) + log(1 + exp(-|x|)): finite for every finite x.
Tensor softplus(const Tensor& x);
// silu(gate) * up in one pass (the SwiGLU MLP's hidden activation); same shapes.
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace loom
