// Reductions over dims (differentiable).
#pragma once
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

// dims empty = all dims.
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
// Maximum; the gradient flows to the first maximal element of each reduced group.
Tensor max(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
// Sums the broadcast dims of x away so the result has `shape` (the backward of broadcasting).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace loom
