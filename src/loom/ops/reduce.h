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
// The sum of squares of every element of `tensors` (undefined ones skipped), each tensor's
// scaled by weights[i] when given; in f64 over f32 values, not differentiable (gradient norms).
double sum_squares(const std::vector<Tensor>& tensors, const std::vector<double>& weights = {});
// Sums the broadcast dims of x away so the result has `shape` (the backward of broadcasting).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace loom
