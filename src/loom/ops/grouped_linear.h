// Grouped GEMM: the experts of a mixture-of-experts layer, each on its own run of rows.
#pragma once
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

// x (M, K) holds consecutive groups of rows, group e of group_sizes[e] rows (summing to M; a
// group may be empty); weight (E, N, K) holds one (N, K) matrix per group. Returns (M, N) with
// the rows of group e equal to x_e W_e^T: every group one GEMM of its own size, nothing padded
// or dropped. Under bf16 autocast the products take bf16 operands and return f32, as linear's.
Tensor grouped_linear(const Tensor& x, const Tensor& weight,
                      const std::vector<int64_t>& group_sizes);

}  // namespace loom
