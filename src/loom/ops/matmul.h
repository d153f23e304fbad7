// Matrix products through the backend GEMM (oneDNN on CPU).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// a (..., M, K) @ b (..., K, N) -> (..., M, N). 2-D or 3-D operands; a 2-D operand
// broadcasts over the other's batch. Transposed operands (views) cost no copy.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., K) @ weight (N, K)^T + bias (N) -> (..., N). bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace loom
