// Scalar math written so that GCC vectorises loops calling it (no libm calls, no branches;
// the build uses -fno-trapping-math so such loops may be vectorised at all).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "loom/core/dtype.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace loom::cpu {

// exp(x) with about 2 ulp error over the f32 range; exp(-inf) = 0, large x saturates.
// Cody-Waite range reduction x = n ln2 + r, degree-6 polynomial for e^r on |r| <= ln2/2.
[[gnu::always_inline]] inline float fast_exp(float x) {
  x = std::min(std::max(x, -104.0f), 88.7f);  // std::fmin/fmax would not vectorise
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693145751953125f, x);
  r = std::fma(n, -1.428606765330187e-06f, r);
  float p = 1.3888889e-3f;
  p = std::fma(p, r, 8.3333333e-3f);
  p = std::fma(p, r, 4.1666667e-2f);
  p = std::fma(p, r, 1.6666667e-1f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // Scale by 2^n in two steps so n down to -150 still produces (sub)normals or zero.
  const int32_t ni = int32_t(n);
  const int32_t n1 = ni / 2, n2 = ni - n1;
  uint32_t b1 = uint32_t(n1 + 127) << 23, b2 = uint32_t(n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}

[[gnu::always_inline]] inline float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1), accurate to a few ulp away from 0; near 0 use x - x^3/3.
  const float e = fast_exp(2.0f * x);
  const float t = 1.0f - 2.0f / (e + 1.0f);
  const float x2 = x * x;
  const float small = x * (1.0f - x2 * (1.0f / 3.0f - x2 * (2.0f / 15.0f)));
  return std::fabs(x) < 0.0625f ? small : t;
}

[[gnu::always_inline]] inline float fast_sigmoid(float x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

// Row reductions in 16 running lanes, combined in a fixed order at the end: GCC vectorises
// these, but neither a max nor a float sum reduction written as one running value (it must
// keep NaN order and rounding order), omp simd reductions included.

// max over x[0..n) widened to f32; -inf for n = 0 (NaN if a NaN meets the running max).
template <typename T>
float lane_max(const T* x, int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes];
  std::fill_n(lanes, kLanes, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = to_f32(x[i + l]);
      lanes[l] = lanes[l] > v ? lanes[l] : v;
    }
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = m > to_f32(x[i]) ? m : to_f32(x[i]);  // std::fmax would call libm
  for (float v : lanes) m = m > v ? m : v;
  return m;
}

// sum over i of exp(x[i] - shift), x widened to f32.
template <typename T>
float lane_sum_exp(const T* x, int64_t n, float shift) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += fast_exp(to_f32(x[i + l]) - shift);
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += fast_exp(to_f32(x[i]) - shift);
  return s;
}

// out[i] = to_bf16(x[i]) for i < n. With AVX512-BF16 in the build, 16 values per instruction:
// its conversion rounds to nearest even and quiets NaNs as to_bf16 does, but reads f32
// subnormals as zero, so a group holding one takes to_bf16 instead (same bits either way).
inline void store_bf16(const float* x, bf16* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512BF16__)
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1),
                largest_subnormal = _mm512_set1_epi32(0x007fffff);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    // |x| in [smallest, largest] subnormal <=> |x| - 1 <= largest - 1, unsigned (0 wraps).
    const __m512i below =
        _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v), magnitude), one);
    const __mmask16 subnormal = _mm512_cmplt_epu32_mask(below, largest_subnormal);
    if (subnormal == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
    } else {
      for (int l = 0; l < 16; ++l) out[i + l] = to_bf16(x[i + l]);
    }
  }
#endif
  for (; i < n; ++i) out[i] = to_bf16(x[i]);
}

}  // namespace loom::cpu
