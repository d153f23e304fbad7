// Views and layout ops (differentiable). Views share storage; contiguous() copies when needed.
#pragma once
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

Tensor reshape(const Tensor& x, Shape shape);  // one dim may be -1; copies only if it must
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  // a slice
Tensor expand(const Tensor& x, const Shape& shape);  // broadcast view (stride 0)
Tensor contiguous(const Tensor& x);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace loom
