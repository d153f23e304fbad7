// Column sums over rows, deterministic and independent of the launch shape: the rows are cut
// into chunks of a count fixed by the row count, each chunk's columns summed in f64 in row
// order, and the chunks then added in order (as the CPU backend does, with chunks of 512). Bias,
// norm-weight, modulation-gate and broadcast gradients all reduce this way, each through a functor
// value(o, r, c) giving the term of row r, column c in group o (so no (rows, C) temporary is
// written).
#pragma once
#include "loom/backend/cuda/device_code.h"

namespace loom::LOOM_CUDA_NS {

// Rows per chunk: about 128 chunks, so that a (16384, 768) gradient gives the GPU 98304
// threads of 128 rows each, and the finishing pass adds 128 partials per column (chunks of
// 512 rows left the first pass a tenth of the GPU's threads).
inline int64_t column_chunk_rows(int64_t rows) {
  const int64_t even = (rows + 127) / 128;
  return even < 32 ? 32 : even;
}

template <typename Fn>
__global__ void column_partials_kernel(Fn value, int64_t outer, int64_t rows, int64_t inner,
                                       int64_t chunks, int64_t chunk_rows, double* partial) {
  LOOM_GRID_STRIDE(item, outer * chunks * inner) {
    const int64_t c = item % inner, oc = item / inner;
    const int64_t chunk = oc % chunks, o = oc / chunks;
    const int64_t r0 = chunk * chunk_rows;
    const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r) acc += double(value(o, r, c));
    partial[item] = acc;
  }
}

template <typename T>
__global__ void column_finish_kernel(const double* partial, int64_t outer, int64_t chunks,
                                     int64_t inner, T* out) {
  LOOM_GRID_STRIDE(col, outer * inner) {
    const int64_t o = col / inner, c = col % inner;
    double total = 0.0;
    for (int64_t k = 0; k < chunks; ++k) total += partial[(o * chunks + k) * inner + c];
    out[col] = from_f32<T>(float(total));
  }
}

// out (outer, inner), contiguous = the sum over r < rows of value(o, r, c).
template <typename Fn, typename T>
void column_reduce(int64_t outer, int64_t rows, int64_t inner, Fn value, T* out, Device device) {
  if (outer * inner == 0) return;
  const int64_t chunk_rows = column_chunk_rows(rows);
  const int64_t chunks = rows > 0 ? (rows + chunk_rows - 1) / chunk_rows : 1;
  Tensor partial = scratch_f64(outer * chunks * inner, device);
  LOOM_LAUNCH(column_partials_kernel<Fn>, blocks_for(outer * chunks * inner), kBlock, value, outer,
              rows, inner, chunks, chunk_rows, f64_ptr(partial));
  LOOM_LAUNCH(column_finish_kernel<T>, blocks_for(outer * inner), kBlock, f64_ptr(partial), outer,
              chunks, inner, out);
}

// The term x[o * outer_stride + r * row_stride + c]: plain column sums.
template <typename T>
struct StridedValue {
  const T* x;
  int64_t row_stride, outer_stride;
  LOOM_HD float operator()(int64_t o, int64_t r, int64_t c) const {
    return to_f32(x[o * outer_stride + r * row_stride + c]);
  }
};

template <typename T>
void column_sums(const T* x, int64_t outer, int64_t rows, int64_t inner, int64_t row_stride,
                 int64_t outer_stride, T* out, Device device) {
  column_reduce(outer, rows, inner, StridedValue<T>{x, row_stride, outer_stride}, out, device);
}

}  // namespace loom::LOOM_CUDA_NS
