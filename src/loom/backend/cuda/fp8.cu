// fp8 with one scale per tensor: the cast of an f32 operand to E4M3 / E5M2 codes for the fp8
// GEMM (matmul.cu: fp8_matmul). Four launches, no atomics (so the counts are the same on every
// run): the amax of fixed runs of elements, the tensor's scale from them (one block), the cast
// with each block's saturated and flushed counts, and those counts added (one block). The
// scale stays on the device: the host never waits for it.
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/cuda/scale_reductions.h"
#include "loom/backend/fp8_scaling.h"
#include "loom/backend/kernel_checks.h"

namespace loom::LOOM_CUDA_NS {

namespace {

// partial[2 r], partial[2 r + 1]: the largest finite magnitude of run r and its count of
// non-finite values.
__global__ void amax_runs_kernel(const float* x, int64_t n, int64_t runs, double* partial) {
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t begin = r * kAmaxRun;
    const int64_t len = n - begin < kAmaxRun ? n - begin : kAmaxRun;
    float amax = 0.0f, non_finite = 0.0f;
    LOOM_BLOCK_STRIDE(i, len) {
      const float a = fabsf(x[begin + i]);
      const bool finite = a <= 3.402823466e38f;  // false for inf and NaN
      amax = fmaxf(amax, finite ? a : 0.0f);
      non_finite += finite ? 0.0f : 1.0f;
    }
    amax = block_max(amax);
    non_finite = block_sum(non_finite);  // at most kAmaxRun: exact in f32
    if (threadIdx.x == 0) {
      partial[2 * r] = double(amax);
      partial[2 * r + 1] = double(non_finite);
    }
  }
}

// One block: the measured amax and the scale (into scale[0]); 1 / scale into inv_scale; the
// measured amax into stats[0] (a max over calls). The counts are whole numbers, so their sum
// is exact in any order.
__global__ void scale_kernel(const double* partial, int64_t runs, float given_amax, bool e4m3,
                             double* scale, float* inv_scale, int64_t* stats) {
  float measured = 0.0f;
  double non_finite = 0.0;
  LOOM_BLOCK_STRIDE(r, runs) {
    measured = fmaxf(measured, float(partial[2 * r]));
    non_finite += partial[2 * r + 1];
  }
  measured = block_max(measured);
  non_finite = block_sum(non_finite);
  if (threadIdx.x != 0) return;
  const float s = fp8_scale(given_amax >= 0 ? given_amax : measured, e4m3, non_finite == 0.0);
  *scale = double(s);
  *inv_scale = 1.0f / s;
  const float previous = f32_from_bits(uint32_t(stats[0]));
  stats[0] = int64_t(f32_bits(fmaxf(previous, measured)));
}

// out (out_rows, out_cols) from x (rows, cols), zeros beyond it; counts[2 b], counts[2 b + 1]:
// block b's saturated and flushed values.
__global__ void cast_kernel(const float* x, int64_t rows, int64_t cols, int64_t out_rows,
                            int64_t out_cols, const double* scale, bool e4m3, uint8_t* out,
                            double* counts) {
  const float s = float(*scale);
  float saturated = 0.0f, flushed = 0.0f;  // per thread: exact below 2^24 values
  LOOM_GRID_STRIDE(i, out_rows * out_cols) {
    const int64_t r = i / out_cols, c = i % out_cols;
    uint8_t q = 0;
    if (r < rows && c < cols) {
      const float v = x[r * cols + c], scaled = v * s;
      q = fp8_encode_saturating(scaled, e4m3);
      saturated += fp8_saturates(scaled, e4m3) ? 1.0f : 0.0f;
      flushed += v != 0.0f && fp8_decode(q, e4m3) == 0.0f ? 1.0f : 0.0f;
    }
    out[i] = q;
  }
  const double block_saturated = block_sum(double(saturated));
  const double block_flushed = block_sum(double(flushed));
  if (threadIdx.x == 0) {
    counts[2 * blockIdx.x] = block_saturated;
    counts[2 * blockIdx.x + 1] = block_flushed;
  }
}

// One block: the blocks' saturated and flushed counts added into stats[1], stats[2] (whole
// numbers again: exact in any order).
__global__ void add_counts_kernel(const double* counts, int64_t blocks, int64_t* stats) {
  double saturated = 0.0, flushed = 0.0;
  LOOM_BLOCK_STRIDE(b, blocks) {
    saturated += counts[2 * b];
    flushed += counts[2 * b + 1];
  }
  saturated = block_sum(saturated);
  flushed = block_sum(flushed);
  if (threadIdx.x != 0) return;
  stats[1] += int64_t(saturated);
  stats[2] += int64_t(flushed);
}

}  // namespace

int64_t amax_runs(int64_t n) {
  return std::max<int64_t>((n + kAmaxRun - 1) / kAmaxRun, 1);
}

void launch_amax_runs(const float* x, int64_t n, double* partial) {
  const int64_t runs = amax_runs(n);
  LOOM_LAUNCH(amax_runs_kernel, blocks_for(runs, 1), kBlock, x, n, runs, partial);
}

void launch_add_counts(const double* counts, int64_t blocks, int64_t* stats) {
  LOOM_LAUNCH(add_counts_kernel, 1, kReduceBlock, counts, blocks, stats);
}

void CudaBackend::fp8_quantize(const Tensor& x, float amax, const Tensor& out,
                               const Tensor& inv_scale, const Tensor& stats) {
  const bool e4m3 = check_fp8_quantize(x, out, inv_scale, stats);
  const int64_t n = x.numel(), runs = amax_runs(n);
  const int64_t total = out.numel();
  const unsigned blocks = blocks_for(total);
  // [runs' amax partials | the scale | the blocks' counts]
  Tensor scratch = scratch_f64(2 * runs + 1 + 2 * int64_t(blocks), x.device());
  double* partial = f64_ptr(scratch);
  double* scale = partial + 2 * runs;
  double* counts = scale + 1;
  launch_amax_runs(ptr<const float>(x), n, partial);
  LOOM_LAUNCH(scale_kernel, 1, kReduceBlock, partial, runs, amax, e4m3, scale,
              ptr<float>(inv_scale), ptr<int64_t>(stats));
  LOOM_LAUNCH(cast_kernel, blocks, kBlock, ptr<const float>(x), x.size(0), x.size(1), out.size(0),
              out.size(1), scale, e4m3, ptr<uint8_t>(out), counts);
  launch_add_counts(counts, int64_t(blocks), ptr<int64_t>(stats));
}

}  // namespace loom::LOOM_CUDA_NS
