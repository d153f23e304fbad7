// Matrix products through the backend GEMM (oneDNN on CPU).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// a (..., M, K) @ b (..., K, N) -> (..., M, N). 2-D or 3-D operands; a 2-D operand
// broadcasts over the other's batch. Transposed operands (views) cost no copy.
Tensor matmul(const Tensor& a, const Tensor& b);
// What a linear returns under autocast (bf16 products of f32 weights): Wide, f32, what the ops
// after it take (the default); or Compute, bf16, the dtype it computed in, rounded once from
// the GEMM's f32 result, for an output that only bf16 kernels read (attention's q, k, v),
// which would otherwise be widened here and rounded again there. Outside autocast both are
// the input's dtype. An input may be bf16 under autocast (a Compute output); its gradient
// is then bf16 too.
enum class AutocastOutput { Wide, Compute };

// x (..., K) @ weight (N, K)^T + bias (N) -> (..., N). bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              AutocastOutput output = AutocastOutput::Wide);
// gelu(linear(x, weight, bias)) (tanh GELU) as one op: the bias is added in the GEMM, and the
// backward takes the GELU's derivative and sums the bias gradient in one pass.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace loom
