// fp8 with one scale per tensor (backend.h): the CPU twin of the CUDA backend's fp8 cast and
// fp8 GEMM. The recipes on the CPU emulate their products themselves (precision/quantize.h);
// this twin is what the CUDA kernels are held against, and runs a recipe's device path on
// host tensors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/fp8_scaling.h"
#include "loom/backend/kernel_checks.h"

namespace loom {

void CpuBackend::fp8_quantize(const Tensor& x, float amax, const Tensor& out,
                              const Tensor& inv_scale, const Tensor& stats) {
  const bool e4m3 = check_fp8_quantize(x, out, inv_scale, stats);
  const int64_t rows = x.size(0), cols = x.size(1), out_cols = out.size(1);
  const float* in = x.data<float>();
  float measured = 0;
  int64_t non_finite = 0;
#pragma omp parallel for schedule(static) reduction(max : measured) reduction(+ : non_finite)
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float a = std::fabs(in[i]);
    const bool finite = a <= std::numeric_limits<float>::max();  // false for inf and NaN
    measured = std::max(measured, finite ? a : 0.0f);
    non_finite += finite ? 0 : 1;
  }
  const float scale = fp8_scale(amax >= 0 ? amax : measured, e4m3, non_finite == 0);
  uint8_t* codes = static_cast<uint8_t*>(out.raw_ptr());
  std::memset(codes, 0, size_t(out.numel()));  // the zero padding
  int64_t saturated = 0, flushed = 0;
#pragma omp parallel for schedule(static) reduction(+ : saturated, flushed)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = in[r * cols + c], scaled = v * scale;
      const uint8_t q = fp8_encode_saturating(scaled, e4m3);
      codes[r * out_cols + c] = q;
      saturated += fp8_saturates(scaled, e4m3) ? 1 : 0;
      flushed += v != 0 && fp8_decode(q, e4m3) == 0 ? 1 : 0;
    }
  inv_scale.data<float>()[0] = 1.0f / scale;
  int64_t* s = stats.data<int64_t>();
  s[0] = int64_t(f32_bits(std::max(f32_from_bits(uint32_t(s[0])), measured)));
  s[1] += saturated;
  s[2] += flushed;
}

void CpuBackend::fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                            const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) {
  check_fp8_matmul(a, a_inv_scale, b, b_inv_scale, bias, out);
  // Each operand decoded and scaled back to f32 (exact: a code times a scale), then one f32
  // GEMM: the products and sums of a tensor core's f32 accumulation, in another order.
  auto widened = [](const Tensor& q, const Tensor& inv) {
    const bool e4m3 = q.dtype() == DType::F8E4M3;
    const float s = inv.data<float>()[0];
    const uint8_t* codes = static_cast<const uint8_t*>(q.raw_ptr());
    Tensor w = Tensor::empty({1, q.size(0), q.size(1)}, DType::F32);
    float* f = w.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < q.numel(); ++i) f[i] = fp8_decode(codes[i], e4m3) * s;
    return w;
  };
  const Tensor wa = widened(a, a_inv_scale), wb = widened(b, b_inv_scale);
  const Tensor bt = wb.as_strided({1, b.size(1), b.size(0)}, {0, 1, b.size(1)}, 0);  // (1, K, N)
  matmul(wa, bt, bias, out.as_strided({1, out.size(0), out.size(1)}, {0, out.size(1), 1}, 0));
}

}  // namespace loom
