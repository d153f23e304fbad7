// Indexing ops (differentiable in their float operands). Indices are i64 and range-checked.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// out = x.index_select(dim, index): slices of x picked along dim by a 1-D index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[i][index[i][j]] (dim 1), index of the output's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Returns a copy of x with src added at index along dim: out[i][index[i][j]] += src[i][j].
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Returns a copy of x with the slices of src added at a 1-D index along dim:
// out[.., index[i], ..] += src[.., i, ..] (repeated indices add up). The backward of
// index_select, and how a mixture of experts adds each expert's output back to its token.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Rows of weight (V, C) picked by ids (...) -> (..., C). Backward scatter-adds into weight.
Tensor embedding(const Tensor& ids, const Tensor& weight);

}  // namespace loom
