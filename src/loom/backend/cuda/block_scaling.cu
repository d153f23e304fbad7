// Block-scaled quantisation (backend.h: block_quantize, hadamard16) on the device, by the
// rules both backends share (backend/block_scaling.h), with the same bits as the recipes'
// emulation on the host. Five launches, no atomics: the tensor's amax in fixed runs, the
// tensor scale from them (one block), each group's scales (a block per group), the cast of
// every value with each block's counts, and those counts added (one block).
#include "loom/backend/block_scaling.h"
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/cuda/scale_reductions.h"
#include "loom/backend/kernel_checks.h"
#include "loom/core/rng.h"

namespace loom::LOOM_CUDA_NS {

namespace {

struct Signs16 {  // hadamard16's signs, passed to the kernel by value
  float v[16];
};

// One block: tensor[0] the amax the tensor scale uses (given, or measured), tensor[1] the
// count of non-finite values; stats[0] takes the measured amax (a max over calls).
__global__ void tensor_amax_kernel(const double* partial, int64_t runs, float given_amax,
                                   float* tensor, int64_t* stats) {
  float measured = 0.0f;
  double non_finite = 0.0;
  LOOM_BLOCK_STRIDE(r, runs) {
    measured = fmaxf(measured, float(partial[2 * r]));
    non_finite += partial[2 * r + 1];
  }
  measured = block_max(measured);
  non_finite = block_sum(non_finite);
  if (threadIdx.x != 0) return;
  tensor[0] = given_amax >= 0 ? given_amax : measured;
  tensor[1] = float(non_finite);
  stats[0] = int64_t(f32_bits(fmaxf(f32_from_bits(uint32_t(stats[0])), measured)));
}

// A block per group of (tr, tc) values: its amax and finiteness, then its two scales into
// scales[2 g], scales[2 g + 1]. One group spanning the tensor takes the tensor's amax.
__global__ void group_scales_kernel(const float* x, int64_t rows, int64_t cols, int64_t tr,
                                    int64_t tc, BlockQuantizeSpec spec, const float* tensor,
                                    float* scales) {
  const int64_t per_row = (cols + tc - 1) / tc, groups = (rows + tr - 1) / tr * per_row;
  const bool one_group = spec.tile_rows == 0 && spec.tile_cols == 0;
  const float tensor_scale = nvfp4_tensor_scale(tensor[0]);
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t r0 = g / per_row * tr, c0 = g % per_row * tc;
    const int64_t h = rows - r0 < tr ? rows - r0 : tr, w = cols - c0 < tc ? cols - c0 : tc;
    float amax = 0.0f, non_finite = 0.0f;
    LOOM_BLOCK_STRIDE(i, one_group ? 0 : h * w) {
      const float a = fabsf(x[(r0 + i / w) * cols + c0 + i % w]);
      const bool finite = a <= 3.402823466e38f;  // false for inf and NaN
      amax = fmaxf(amax, finite ? a : 0.0f);
      non_finite += finite ? 0.0f : 1.0f;
    }
    amax = block_max(amax);
    non_finite = block_sum(non_finite);
    if (threadIdx.x == 0) {
      const GroupScales s = one_group
                                ? group_scales(spec, tensor[0], tensor[1] == 0.0f, tensor_scale)
                                : group_scales(spec, amax, non_finite == 0.0f, tensor_scale);
      scales[2 * g] = s.to_element;
      scales[2 * g + 1] = s.from_element;
    }
  }
}

// Every value through its group's scales; counts[2 b], counts[2 b + 1]: block b's saturated
// and flushed values.
__global__ void block_cast_kernel(const float* x, int64_t rows, int64_t cols, int64_t tr,
                                  int64_t tc, BlockQuantizeSpec spec, const float* scales,
                                  float* out, double* counts) {
  const int64_t per_row = (cols + tc - 1) / tc;
  const float overflow = quant_overflow(spec.element);
  float saturated = 0.0f, flushed = 0.0f;  // per thread: exact below 2^24 values
  LOOM_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols, g = r / tr * per_row + c / tc;
    const float v = x[i], scaled = v * scales[2 * g];
    const float u = spec.stochastic ? uniform_at(spec.sr_key, uint64_t(i)) : -1.0f;
    const float q = quant_round(spec.element, scaled, u);
    out[i] = q * scales[2 * g + 1];
    saturated += fabsf(scaled) >= overflow ? 1.0f : 0.0f;
    flushed += v != 0.0f && q == 0.0f ? 1.0f : 0.0f;
  }
  const double block_saturated = block_sum(double(saturated));
  const double block_flushed = block_sum(double(flushed));
  if (threadIdx.x == 0) {
    counts[2 * blockIdx.x] = block_saturated;
    counts[2 * blockIdx.x + 1] = block_flushed;
  }
}

// A thread per run of 16 values: signs, the butterflies of the fast Walsh-Hadamard transform
// (in the host's order), / 4.
__global__ void hadamard16_kernel(const float* x, int64_t rows, int64_t cols, int64_t padded,
                                  Signs16 signs, float* out) {
  LOOM_GRID_STRIDE(run, rows * (padded / 16)) {
    const int64_t r = run / (padded / 16), b = run % (padded / 16) * 16;
    hadamard16_run(x + r * cols, cols, b, signs.v, out + r * padded + b);
  }
}

}  // namespace

void CudaBackend::block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                                 const Tensor& stats) {
  check_block_quantize(x, spec, out, stats);
  const int64_t rows = x.size(0), cols = x.size(1), n = x.numel(), runs = amax_runs(n);
  const int64_t tr = spec.tile_rows ? spec.tile_rows : rows;
  const int64_t tc = spec.tile_cols ? spec.tile_cols : cols;
  const int64_t groups = (rows + tr - 1) / tr * ((cols + tc - 1) / tc);
  const unsigned blocks = blocks_for(n);
  // [runs' amax partials | the blocks' counts | the tensor's amax and non-finite count | the
  // groups' scales (f32 pairs: one double each)]
  Tensor scratch = scratch_f64(2 * runs + 2 * int64_t(blocks) + 1 + groups, x.device());
  double* partial = f64_ptr(scratch);
  double* counts = partial + 2 * runs;
  float* tensor = reinterpret_cast<float*>(counts + 2 * int64_t(blocks));
  float* scales = tensor + 2;
  // A group of few values takes a block of one warp: most groups are 16 or 32 values.
  [[maybe_unused]] const int group_threads = tr * tc >= kBlock ? kBlock : 32;
  launch_amax_runs(ptr<const float>(x), n, partial);
  LOOM_LAUNCH(tensor_amax_kernel, 1, kReduceBlock, partial, runs, spec.amax, tensor,
              ptr<int64_t>(stats));
  LOOM_LAUNCH(group_scales_kernel, blocks_for(groups, 1), group_threads, ptr<const float>(x), rows,
              cols, tr, tc, spec, tensor, scales);
  LOOM_LAUNCH(block_cast_kernel, blocks, kBlock, ptr<const float>(x), rows, cols, tr, tc, spec,
              scales, ptr<float>(out), counts);
  launch_add_counts(counts, int64_t(blocks), ptr<int64_t>(stats));
}

void CudaBackend::hadamard16(const Tensor& x, const std::array<float, 16>& signs,
                             const Tensor& out) {
  check_hadamard16(x, out);
  const int64_t rows = x.size(0), cols = x.size(1), padded = out.size(1);
  Signs16 s;
  for (int i = 0; i < 16; ++i) s.v[i] = signs[size_t(i)];
  LOOM_LAUNCH(hadamard16_kernel, blocks_for(rows * (padded / 16)), kBlock, ptr<const float>(x),
              rows, cols, padded, s, ptr<float>(out));
}

}  // namespace loom::LOOM_CUDA_NS
