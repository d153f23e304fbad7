// Operand quantisation by recipe and the emulated GEMM (quantize.h).
#include "loom/precision/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::precision {
namespace {

// The group of value (r, c) under a scaling: values of one group share a scale.
struct Groups {
  int64_t tile_rows, tile_cols;  // 0: the whole dimension
  int64_t count(int64_t rows, int64_t cols) const {
    return (tile_rows ? rows / tile_rows : 1) * (tile_cols ? cols / tile_cols : 1);
  }
  int64_t of(int64_t r, int64_t c, int64_t cols) const {
    const int64_t per_row = tile_cols ? cols / tile_cols : 1;
    return (tile_rows ? r / tile_rows : 0) * per_row + (tile_cols ? c / tile_cols : 0);
  }
};

Groups groups_of(Scaling s) {
  switch (s) {
    case Scaling::Tensor:
      return {0, 0};
    case Scaling::Tile1x128:
      return {1, 128};
    case Scaling::Block128:
      return {128, 128};
    case Scaling::Mx:
      return {1, kMxBlock};
    case Scaling::Nvfp4:
      return {1, kNvfp4Block};
    case Scaling::Nvfp4Square:
      return {kNvfp4Block, kNvfp4Block};
  }
  return {0, 0};
}

void check(Element e, Scaling s, int64_t rows, int64_t cols) {
  const bool fp8 = e == Element::E4M3 || e == Element::E5M2;
  const bool fits = s == Scaling::Mx ||
                    (s == Scaling::Nvfp4 || s == Scaling::Nvfp4Square ? e == Element::E2M1 : fp8);
  LOOM_CHECK(fits) << "precision: " << scaling_name(s) << " scaling does not take "
                   << element_name(e) << " elements";
  const Groups g = groups_of(s);
  LOOM_CHECK(rows > 0 && cols > 0 && (!g.tile_rows || rows % g.tile_rows == 0) &&
             (!g.tile_cols || cols % g.tile_cols == 0))
      << "precision: a (" << rows << ", " << cols << ") operand does not split into "
      << scaling_name(s) << " tiles of " << (g.tile_rows ? g.tile_rows : rows) << " x "
      << (g.tile_cols ? g.tile_cols : cols);
}

// Stores v * scaled -> element -> / scaled into *out and counts it.
void quantize_value(float v, float to_element, float from_element, Element e, float u, float* out,
                    QuantizeStats& stats) {
  const float scaled = v * to_element;
  stats.saturated += std::fabs(double(scaled)) >= element_overflow(e);
  const float q = decode(e, encode(e, scaled, u));
  *out = q * from_element;
  stats.flushed += v != 0 && q == 0;
}

}  // namespace

const char* scaling_name(Scaling s) {
  switch (s) {
    case Scaling::Tensor:
      return "tensorwise";
    case Scaling::Tile1x128:
      return "1x128 tile";
    case Scaling::Block128:
      return "128x128 block";
    case Scaling::Mx:
      return "MX";
    case Scaling::Nvfp4:
      return "NVFP4";
    case Scaling::Nvfp4Square:
      return "NVFP4 16x16";
  }
  return "?";
}

QuantizeStats fake_quantize(const float* x, int64_t rows, int64_t cols, Element element,
                            Scaling scaling, float* out, const QuantizeOptions& options) {
  check(element, scaling, rows, cols);
  const int64_t n = rows * cols;
  QuantizeStats stats;
  stats.values = n;
  auto draw = [&](int64_t i) {
    return options.sr ? uniform_at(options.sr->key, options.sr->offset + uint64_t(i)) : -1.0f;
  };
  if (scaling == Scaling::Mx) {  // the spec's rule, block_scaling.cpp
    const MxQuantized q = mx_quantize(x, n, element, kMxBlock, options.sr);
    mx_dequantize(q, out);
    for (int64_t i = 0; i < n; ++i) {
      const float scale = decode_e8m0(q.scales[size_t(i / kMxBlock)]);
      stats.saturated += std::fabs(double(x[i]) / double(scale)) >= element_overflow(element);
      stats.flushed += x[i] != 0 && out[i] == 0;
    }
    return stats;
  }
  // Per-group amax; the whole operand's too (the tensor scale of Tensor and NVFP4). A NaN or
  // an infinity makes its group (tensorwise: the operand) NaN, as MX's NaN scale does, so a
  // diverged step reaches the loss and the step guard instead of being scaled away.
  LOOM_CHECK(std::isfinite(options.amax))
      << "precision: the given amax must be finite, got " << options.amax;
  const Groups g = groups_of(scaling);
  std::vector<float> amax(size_t(g.count(rows, cols)), 0.0f);
  std::vector<char> finite(amax.size(), 1);
  float tensor_amax = 0;
  bool tensor_finite = true;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = std::fabs(x[r * cols + c]);
      const size_t k = size_t(g.of(r, c, cols));
      amax[k] = std::max(amax[k], v);
      tensor_amax = std::max(tensor_amax, v);
      if (!std::isfinite(v)) finite[k] = 0, tensor_finite = false;
    }
  if (options.amax >= 0) tensor_amax = options.amax;
  std::vector<float> to_element(amax.size()), from_element(amax.size());
  const bool nvfp4 = scaling == Scaling::Nvfp4 || scaling == Scaling::Nvfp4Square;
  const float tensor_scale = tensor_amax > 0 ? float(6.0 * 448.0 / double(tensor_amax)) : 1.0f;
  for (size_t k = 0; k < amax.size(); ++k) {
    if (!finite[k] || (scaling == Scaling::Tensor && !tensor_finite)) {
      to_element[k] = from_element[k] = NAN;
      continue;
    }
    const float a = scaling == Scaling::Tensor ? tensor_amax : amax[k];
    if (nvfp4) {  // E4M3 block scale under the f32 tensor scale (block_scaling.h)
      const float s = decode(Element::E4M3, encode(Element::E4M3, a / 6.0f * tensor_scale));
      to_element[k] = s > 0 ? tensor_scale / s : 0.0f;
      from_element[k] = s / tensor_scale;
    } else {  // an f32 scale that maps the group's amax to the format's largest value
      const float scale = a > 0 ? float(element_max(element) / double(a)) : 1.0f;
      to_element[k] = scale;
      from_element[k] = 1.0f / scale;
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c, k = g.of(r, c, cols);
      quantize_value(x[i], to_element[size_t(k)], from_element[size_t(k)], element, draw(i),
                     out + i, stats);
    }
  return stats;
}

void gemm_nt(const float* a, const float* b, int64_t M, int64_t N, int64_t K, float* c) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[m * K + k] * b[n * K + k];
      c[m * N + n] = s;
    }
}

}  // namespace loom::precision
