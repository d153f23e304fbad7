// Operand quantisation by recipe and the emulated GEMM (quantize.h).
#include "loom/precision/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::precision {
namespace {

// The groups of a scaling: values of a (tile_rows, tile_cols) tile share a scale; 0 spans the
// whole dimension. Edge tiles may be partial.
struct Groups {
  int64_t tile_rows, tile_cols;
};

Groups groups_of(Scaling s, int64_t block) {
  switch (s) {
    case Scaling::Tensor:
      return {0, 0};
    case Scaling::Tile1x128:
      return {1, block ? block : 128};
    case Scaling::Block128:
      return {block ? block : 128, block ? block : 128};
    case Scaling::Mx:
      return {1, kMxBlock};
    case Scaling::Nvfp4:
      return {1, kNvfp4Block};
    case Scaling::Nvfp4Square:
      return {kNvfp4Block, kNvfp4Block};
  }
  return {0, 0};
}

void check(Element e, Scaling s, int64_t rows, int64_t cols, int64_t block) {
  const bool fp8 = e == Element::E4M3 || e == Element::E5M2;
  const bool nvfp4 = s == Scaling::Nvfp4 || s == Scaling::Nvfp4Square;
  const bool fits = s == Scaling::Mx || (nvfp4 ? e == Element::E2M1 : fp8);
  LOOM_CHECK(fits) << "precision: " << scaling_name(s) << " scaling does not take "
                   << element_name(e) << " elements";
  LOOM_CHECK(rows > 0 && cols > 0)
      << "precision: an empty (" << rows << ", " << cols << ") operand";
  if (block == 0 || s == Scaling::Tensor) return;
  if (s == Scaling::Tile1x128 || s == Scaling::Block128) {
    LOOM_CHECK(block >= 16 && block <= 1024 && (block & (block - 1)) == 0)
        << "precision: " << scaling_name(s) << " scaling takes blocks of a power of two from "
        << "16 to 1024 values, not " << block;
    return;
  }
  const int64_t own = s == Scaling::Mx ? kMxBlock : kNvfp4Block;
  LOOM_CHECK(block == own) << "precision: " << scaling_name(s) << " blocks are " << own
                           << " values by the format's definition, not " << block;
}

// floor(log2 a) for a finite a > 0, from the bits where a is normal.
int exponent_of(float a) {
  uint32_t bits;
  std::memcpy(&bits, &a, 4);
  const int e = int(bits >> 23) - 127;
  return e > -127 ? e : std::ilogb(a);
}

// 2^e for e in [-127, 127] (2^-127 is subnormal).
float power_of_two(int e) {
  if (e < -126) return std::ldexp(1.0f, e);
  const uint32_t bits = uint32_t(e + 127) << 23;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Each group's scales: value v quantises as round(v * to_element) * from_element.
struct Scale {
  float to_element, from_element;
};

Scale scale_of(Scaling s, Element e, float amax, bool finite, float tensor_scale) {
  if (!finite) return {NAN, NAN};
  if (s == Scaling::Mx) {  // OCP MX v1.0: 2^(floor(log2 amax) - emax); zeros: the smallest
    const int x = amax == 0 ? -127 : std::clamp(exponent_of(amax) - element_emax(e), -127, 127);
    return {power_of_two(-x), power_of_two(x)};
  }
  if (s == Scaling::Nvfp4 || s == Scaling::Nvfp4Square) {  // E4M3 block scale (block_scaling.h)
    const float b = round_to_fast(Element::E4M3, amax / 6.0f * tensor_scale);
    return {b > 0 ? tensor_scale / b : 0.0f, b / tensor_scale};
  }
  // An f32 scale that maps the group's amax to the format's largest value.
  const float scale = amax > 0 ? float(element_max(e) / double(amax)) : 1.0f;
  return {scale, 1.0f / scale};
}

// n consecutive values sharing one scale: x[i] -> out[i], their draws at index + i.
struct Run {
  const float* x;
  float* out;
  int64_t n;
  Scale scale;
  const StochasticRounding* sr;
  uint64_t index;
};

template <Element E, bool Stochastic>
void quantize_values(const Run& run, int64_t& saturated, int64_t& flushed) {
  constexpr float overflow = E == Element::E4M3 ? 464.0f : E == Element::E5M2 ? 61440.0f : 7.0f;
  int64_t sat = 0, flush = 0;
  for (int64_t i = 0; i < run.n; ++i) {
    const float v = run.x[i], scaled = v * run.scale.to_element;
    const float u =
        Stochastic ? uniform_at(run.sr->key, run.sr->offset + run.index + uint64_t(i)) : -1.0f;
    const float q = round_to_element<E>(scaled, u);
    run.out[i] = q * run.scale.from_element;
    sat += std::fabs(scaled) >= overflow ? 1 : 0;
    flush += v != 0 && q == 0 ? 1 : 0;
  }
  saturated += sat;
  flushed += flush;
}

template <Element E>
void quantize_run(const Run& run, int64_t& saturated, int64_t& flushed) {
  if (run.sr) {
    quantize_values<E, true>(run, saturated, flushed);
  } else {
    quantize_values<E, false>(run, saturated, flushed);
  }
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
  check(element, scaling, rows, cols, options.block);
  LOOM_CHECK(std::isfinite(options.amax))
      << "precision: the given amax must be finite, got " << options.amax;
  const int64_t n = rows * cols;
  // The operand's amax (NaN-free) and whether it is all finite: the tensor scale of Tensor and
  // NVFP4, and what delayed scaling records.
  float measured = 0;
  int64_t non_finite = 0;
#pragma omp parallel for schedule(static) reduction(max : measured) reduction(+ : non_finite)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    const bool finite = a <= std::numeric_limits<float>::max();  // false for inf and NaN
    measured = std::max(measured, finite ? a : 0.0f);
    non_finite += finite ? 0 : 1;
  }
  const bool whole = scaling == Scaling::Tensor;
  const float tensor_amax = options.amax >= 0 ? options.amax : measured;
  const float tensor_scale = tensor_amax > 0 ? float(6.0 * 448.0 / double(tensor_amax)) : 1.0f;
  const Scale whole_scale = scale_of(scaling, element, tensor_amax, non_finite == 0, tensor_scale);

  // Bands of tile rows (single rows for tensorwise scaling, whose one scale is known), each
  // taking its groups' amax, their scales, then every value through its group's scales.
  const Groups g = groups_of(scaling, options.block);
  const int64_t tr = whole ? 1 : g.tile_rows, tc = g.tile_cols ? g.tile_cols : cols;
  const int64_t bands = (rows + tr - 1) / tr, per_row = (cols + tc - 1) / tc;
  int64_t saturated = 0, flushed = 0;
#pragma omp parallel for schedule(static) reduction(+ : saturated, flushed)
  for (int64_t band = 0; band < bands; ++band) {
    const int64_t r0 = band * tr, r1 = std::min(rows, r0 + tr);
    std::vector<Scale> scales(size_t(per_row), whole_scale);
    if (!whole)
      for (int64_t k = 0; k < per_row; ++k) {
        const int64_t c0 = k * tc, c1 = std::min(cols, c0 + tc);
        float amax = 0;
        bool finite = true;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) {
            const float a = std::fabs(x[r * cols + c]);
            amax = std::max(amax, a);
            finite &= std::isfinite(a);
          }
        scales[size_t(k)] = scale_of(scaling, element, amax, finite, tensor_scale);
      }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = 0; k < per_row; ++k) {
        const int64_t c0 = k * tc, i0 = r * cols + c0;
        const Run run{x + i0,     out + i0,    std::min(tc, cols - c0), scales[size_t(k)],
                      options.sr, uint64_t(i0)};
        switch (element) {
          case Element::E4M3:
            quantize_run<Element::E4M3>(run, saturated, flushed);
            break;
          case Element::E5M2:
            quantize_run<Element::E5M2>(run, saturated, flushed);
            break;
          case Element::E2M1:
            quantize_run<Element::E2M1>(run, saturated, flushed);
            break;
        }
      }
  }
  return {n, saturated, flushed, measured};
}

void hadamard16(float* x, int64_t rows, int64_t cols, const float signs[16]) {
  LOOM_CHECK(cols % 16 == 0) << "precision: the Hadamard transform rotates runs of 16 values; "
                             << cols << " columns do not split into them";
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols; b += 16) {
      float v[16];
      for (int i = 0; i < 16; ++i) v[i] = x[r * cols + b + i] * signs[i];
      for (int h = 1; h < 16; h *= 2)  // the fast Walsh-Hadamard butterflies
        for (int i = 0; i < 16; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            const float p = v[j], q = v[j + h];
            v[j] = p + q;
            v[j + h] = p - q;
          }
      for (int i = 0; i < 16; ++i) x[r * cols + b + i] = v[i] * 0.25f;
    }
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
