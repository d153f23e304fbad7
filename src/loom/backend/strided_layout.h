// N operands of one shape with their own strides, with the dims that need no separate index
// merged: what every backend's elementwise kernels walk.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

template <size_t N>
struct StridedLayout {
  Shape shape;                   // coalesced; at least one dim
  std::array<Shape, N> strides;  // per operand, in elements
  int64_t rows() const {         // product of all but the last dim
    int64_t r = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) r *= shape[d];
    return r;
  }
};

// Merges dims that are contiguous with their neighbour in every operand, and drops size-1
// dims, so most elementwise calls become a single long row.
template <size_t N>
StridedLayout<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  StridedLayout<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out.shape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = out.strides[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      out.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) out.strides[k].back() = (*strides[k])[d];
    } else {
      out.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) out.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (out.shape.empty()) {
    out.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(1);
  }
  return out;
}

}  // namespace loom
