// Matrix products through the backend GEMM (oneDNN on CPU).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// a (..., M, K) @ b (..., K, N) -> (..., M, N). 2-D or 3-D operands; a 2-D operand
// broadcasts over the other's batch. Transposed operands (views) cost no copy.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., K) @ weight (N, K)^T + bias (N) -> (..., N). bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias)) (tanh GELU) as one op: the bias is added in the GEMM, and the
// backward takes the GELU's derivative and sums the bias gradient in one pass.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace loom
