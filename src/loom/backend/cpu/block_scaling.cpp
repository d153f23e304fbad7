// Block-scaled quantisation (backend.h: block_quantize, hadamard16): the CPU twin of the CUDA
// backend's kernels, from the same rules (backend/block_scaling.h). The recipes on the CPU
// quantise through their own emulation (precision/quantize.h), which the tests hold both
// backends against. And the wire's int8 / int4 blocks (wire_encode, wire_decode:
// backend/wire_quantize.h), a block per iteration.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/kernel_checks.h"
#include "loom/core/rng.h"

namespace loom {

void CpuBackend::block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                                const Tensor& stats) {
  check_block_quantize(x, spec, out, stats);
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* in = x.data<float>();
  float* o = out.data<float>();
  float measured = 0;
  int64_t non_finite = 0;
#pragma omp parallel for schedule(static) reduction(max : measured) reduction(+ : non_finite)
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float a = std::fabs(in[i]);
    const bool finite = a <= std::numeric_limits<float>::max();  // false for inf and NaN
    measured = std::max(measured, finite ? a : 0.0f);
    non_finite += finite ? 0 : 1;
  }
  const float tensor_amax = spec.amax >= 0 ? spec.amax : measured;
  const float tensor_scale = nvfp4_tensor_scale(tensor_amax);
  const bool one_group = spec.tile_rows == 0 && spec.tile_cols == 0;
  const int64_t tr = spec.tile_rows ? spec.tile_rows : rows;
  const int64_t tc = spec.tile_cols ? spec.tile_cols : cols;
  const int64_t bands = (rows + tr - 1) / tr, per_row = (cols + tc - 1) / tc;
  const float overflow = quant_overflow(spec.element);
  int64_t saturated = 0, flushed = 0;
#pragma omp parallel for schedule(static) reduction(+ : saturated, flushed)
  for (int64_t band = 0; band < bands; ++band) {
    const int64_t r0 = band * tr, r1 = std::min(rows, r0 + tr);
    std::vector<GroupScales> scales(static_cast<size_t>(per_row));
    for (int64_t k = 0; k < per_row; ++k) {
      const int64_t c0 = k * tc, c1 = std::min(cols, c0 + tc);
      float amax = 0;
      bool finite = true;
      for (int64_t r = r0; r < r1 && !one_group; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float a = std::fabs(in[r * cols + c]);
          finite &= a <= std::numeric_limits<float>::max();
          if (a <= std::numeric_limits<float>::max()) amax = std::max(amax, a);
        }
      if (one_group) amax = tensor_amax, finite = non_finite == 0;
      scales[size_t(k)] = group_scales(spec, amax, finite, tensor_scale);
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const GroupScales s = scales[size_t(c / tc)];
        const float v = in[i], scaled = v * s.to_element;
        const float u = spec.stochastic ? uniform_at(spec.sr_key, uint64_t(i)) : -1.0f;
        const float q = quant_round(spec.element, scaled, u);
        o[i] = q * s.from_element;
        saturated += std::fabs(scaled) >= overflow ? 1 : 0;
        flushed += v != 0 && q == 0 ? 1 : 0;
      }
  }
  int64_t* st = stats.data<int64_t>();
  st[0] = int64_t(f32_bits(std::max(f32_from_bits(uint32_t(st[0])), measured)));
  st[1] += saturated;
  st[2] += flushed;
}

void CpuBackend::hadamard16(const Tensor& x, const std::array<float, 16>& signs,
                            const Tensor& out) {
  check_hadamard16(x, out);
  const int64_t rows = x.size(0), cols = x.size(1), padded = out.size(1);
  const float* in = x.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < padded; b += 16)
      hadamard16_run(in + r * cols, cols, b, signs.data(), o + r * padded + b);
}

void CpuBackend::wire_encode(const Tensor& x, const WireQuant& q, const Tensor& out) {
  check_wire("wire_encode", x, q, out);
  const int64_t n = x.numel(), blocks = (n + q.block - 1) / q.block,
                stride = wire_bytes(q, q.block);
  const float* in = x.data<float>();
  uint8_t* o = out.data<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    wire_encode_block(q, in + b * q.block, std::min(q.block, n - b * q.block), o + b * stride);
}

void CpuBackend::wire_decode(const Tensor& in, const WireQuant& q, const Tensor& out) {
  check_wire("wire_decode", out, q, in);
  const int64_t n = out.numel(), blocks = (n + q.block - 1) / q.block,
                stride = wire_bytes(q, q.block);
  const uint8_t* i = in.data<uint8_t>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    wire_decode_block(q, i + b * stride, std::min(q.block, n - b * q.block), o + b * q.block);
}

}  // namespace loom
