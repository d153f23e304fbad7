// Reductions: over the last dim of rows (sum in f64, max with argmax), over the middle of
// three dims, and the sum of squares behind gradient norms.
#include "loom/backend/cuda/column_sums.h"
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/kernel_checks.h"

namespace loom::LOOM_CUDA_NS {

namespace {

// One block per row.
template <typename T>
__global__ void row_sum_kernel(const T* x, int64_t rows, int64_t n, T* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    double acc = 0.0;
    LOOM_BLOCK_STRIDE(i, n) acc += double(to_f32(row[i]));
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[r] = from_f32<T>(float(acc));
  }
}

// Max with the first index of it; NaN wins (as on the CPU). Each thread scans its elements in
// order; then thread 0 combines the threads' results in thread order, so the first maximum is
// the one reported.
template <typename T>
__global__ void row_max_kernel(const T* x, int64_t rows, int64_t n, T* out, int64_t* argmax) {
  __shared__ float best_v[kBlock];
  __shared__ int64_t best_i[kBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    float best = -INFINITY;
    int64_t at = -1;
    LOOM_BLOCK_STRIDE(i, n) {
      const float v = to_f32(row[i]);
      if (at < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        at = i;
      }
    }
    best_v[threadIdx.x] = best;
    best_i[threadIdx.x] = at;
    __syncthreads();
    if (threadIdx.x == 0) {
      float b = best_v[0];
      int64_t a = best_i[0];
      for (unsigned t = 1; t < blockDim.x; ++t) {
        const float v = best_v[t];
        const int64_t i = best_i[t];
        if (i < 0) continue;
        const bool better = v > b || (isnan(v) && !isnan(b));
        const bool tie_earlier = v == b && i < a;
        if (a < 0 || better || tie_earlier) {
          b = v;
          a = i;
        }
      }
      out[r] = from_f32<T>(b);
      if (argmax) argmax[r] = a;
    }
    __syncthreads();
  }
}

}  // namespace

void CudaBackend::reduce_rows(ReduceOp op, const Tensor& x, const Tensor& out,
                              const Tensor& argmax) {
  check_reduce_rows(x, out);
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  dispatch_float(x.dtype(), "reduce_rows", [&](auto z) {
    using T = decltype(z);
    const unsigned grid = blocks_for(rows, 1);
    if (op == ReduceOp::Sum) {
      LOOM_LAUNCH(row_sum_kernel<T>, grid, kBlock, ptr<const T>(x), rows, n, ptr<T>(out));
    } else {
      LOOM_CHECK(n > 0) << "reduce_rows: max over an empty dim";
      LOOM_LAUNCH(row_max_kernel<T>, grid, kBlock, ptr<const T>(x), rows, n, ptr<T>(out),
                  argmax.defined() ? ptr<int64_t>(argmax) : nullptr);
    }
  });
}

void CudaBackend::sum_middle(const Tensor& x, const Tensor& out) {
  LOOM_CHECK(x.dim() == 3 && x.is_contiguous())
      << "sum_middle: expected contiguous (outer, n, inner), got " << x.shape();
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  LOOM_CHECK(out.numel() == outer * inner && out.dtype() == x.dtype() && out.is_contiguous())
      << "sum_middle: output " << out.shape() << " for input " << x.shape();
  dispatch_float(x.dtype(), "sum_middle", [&](auto z) {
    using T = decltype(z);
    column_sums<T>(ptr<const T>(x), outer, n, inner, inner, n * inner, ptr<T>(out), x.device());
  });
}

namespace {
constexpr int64_t kSquaresRun = 1024;
// One f32 partial per run of 1024 elements (as on the CPU; the order within a run differs).
__global__ void squares_kernel(const float* x, int64_t n, int64_t runs, double* partial) {
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t begin = r * kSquaresRun;
    const int64_t len = n - begin < kSquaresRun ? n - begin : kSquaresRun;
    float s = 0.0f;
    LOOM_BLOCK_STRIDE(i, len) s += x[begin + i] * x[begin + i];
    s = block_sum(s);
    if (threadIdx.x == 0) partial[r] = double(s);
  }
}
// The partials added by one block, in the same order on every run (a fixed block size).
__global__ void sum_partials_kernel(const double* partial, int64_t runs, double* total) {
  double t = 0.0;
  LOOM_BLOCK_STRIDE(r, runs) t += partial[r];
  t = block_sum(t);
  if (threadIdx.x == 0) *total = t;
}
}  // namespace

double CudaBackend::sum_squares(const Tensor& x) {
  LOOM_CHECK(x.dtype() == DType::F32 && x.is_contiguous())
      << "sum_squares: expected a contiguous f32 tensor, got " << dtype_name(x.dtype()) << " "
      << x.shape();
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const int64_t runs = (n + kSquaresRun - 1) / kSquaresRun;
  Tensor partial = scratch_f64(runs + 1, x.device());
  double* p = f64_ptr(partial);
  LOOM_LAUNCH(squares_kernel, blocks_for(runs, 1), kBlock, ptr<const float>(x), n, runs, p);
  LOOM_LAUNCH(sum_partials_kernel, 1, kReduceBlock, p, runs, p + runs);
  double total = 0.0;
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(&total, p + runs, sizeof(double), cudaMemcpyDeviceToHost, stream()));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return total;
}

}  // namespace loom::LOOM_CUDA_NS
