// Walking N operands of one shape with their own strides, one innermost row at a time, in
// parallel.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "loom/backend/cpu/parallel.h"
#include "loom/backend/strided_layout.h"

namespace loom::cpu {

using loom::coalesce;
using loom::StridedLayout;

// Calls fn(offsets, len, inner_strides) for every innermost row (or piece of one), in parallel.
// offsets[k] is operand k's element offset of the row (piece) start. fn must treat elements
// independently: when there are fewer rows than threads, long rows are cut into pieces so
// that a contiguous tensor (one coalesced row) still uses every thread.
template <size_t N, typename Fn>
void for_each_row(const StridedLayout<N>& L, int64_t cost_per_element, Fn fn) {
  const int64_t len = L.shape.back();
  const int64_t rows = L.rows();
  const size_t outer = L.shape.size() - 1;
  std::array<int64_t, N> inner;
  for (size_t k = 0; k < N; ++k) inner[k] = L.strides[k].back();
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  constexpr int64_t kMinPiece = 4096;  // elements; below this a fork costs more than it saves
  if (rows > 0 && rows < threads && len >= 2 * kMinPiece) {
    const int64_t pieces_per_row = std::min((threads + rows - 1) / rows, len / kMinPiece);
    const int64_t piece = (len + pieces_per_row - 1) / pieces_per_row;
    parallel_for(rows * pieces_per_row, piece * cost_per_element, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        int64_t r = item / pieces_per_row;
        const int64_t start = (item % pieces_per_row) * piece;
        std::array<int64_t, N> off{};
        for (size_t d = outer; d-- > 0;) {
          const int64_t i = r % L.shape[d];
          r /= L.shape[d];
          for (size_t k = 0; k < N; ++k) off[k] += i * L.strides[k][d];
        }
        for (size_t k = 0; k < N; ++k) off[k] += start * inner[k];
        fn(off, std::min(piece, len - start), inner);
      }
    });
    return;
  }
  parallel_for(rows, len * cost_per_element, [&](int64_t begin, int64_t end) {
    // Coordinates of row `begin`, then incremented like an odometer.
    std::vector<int64_t> idx(outer, 0);
    int64_t r = begin;
    for (size_t d = outer; d-- > 0;) {
      idx[d] = r % L.shape[d];
      r /= L.shape[d];
    }
    std::array<int64_t, N> off{};
    for (size_t k = 0; k < N; ++k)
      for (size_t d = 0; d < outer; ++d) off[k] += idx[d] * L.strides[k][d];
    for (int64_t row = begin; row < end; ++row) {
      fn(off, len, inner);
      for (size_t d = outer; d-- > 0;) {
        for (size_t k = 0; k < N; ++k) off[k] += L.strides[k][d];
        if (++idx[d] < L.shape[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= L.strides[k][d] * L.shape[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace loom::cpu
