// LayerNorm's row statistics, shared by the plain LayerNorm and the one fused with adaLN
// modulation (norm.cpp, modulate.cpp).
#pragma once
#include <cmath>
#include <cstdint>

#include "loom/core/dtype.h"

namespace loom::cpu {

// Mean and 1 / sqrt(variance + eps) of C values, in f32 (two vectorised passes).
template <typename T>
inline void layer_norm_stats(const T* row, int64_t C, float eps, float& mean, float& rstd) {
  float m = 0.0f;
#pragma omp simd reduction(+ : m)
  for (int64_t i = 0; i < C; ++i) m += to_f32(row[i]);
  m /= float(C);
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < C; ++i) {
    const float d = to_f32(row[i]) - m;
    v += d * d;
  }
  mean = m;
  rstd = 1.0f / std::sqrt(v / float(C) + eps);
}

}  // namespace loom::cpu
