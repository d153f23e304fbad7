// Block-scaled quantisation of a GEMM operand, as both backends compute it
// (Backend::block_quantize): the scale of a group of values and the rounding of a scaled value
// to its element format, for fp8_blockwise (1x128 tiles, 128x128 blocks), MXFP8 (E8M0 scales
// per 32 values) and NVFP4 (E4M3 scales per 16 values under a tensor scale). The recipes' own
// emulation (precision/quantize.h) is the independent reference the tests hold these against,
// bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "loom/core/dtype.h"
#include "loom/core/host_device.h"

namespace loom {

enum class QuantElement : uint8_t { E4M3, E5M2, E2M1 };

// How a group's scale is made from its amax.
enum class GroupScale : uint8_t {
  Max,    // f32: the element format's largest value / amax (1 for zeros)
  E8M0,   // OCP MX v1.0: 2^(floor(log2 amax) - emax), clamped to E8M0's [-127, 127]
  Nvfp4,  // E4M3(amax / 6 x tensor scale), the tensor scale 6 x 448 / amax(tensor)
};

struct BlockQuantizeSpec {
  QuantElement element = QuantElement::E4M3;
  GroupScale scale = GroupScale::Max;
  // Values of a (tile_rows, tile_cols) tile share a scale; 0 spans the whole dimension. Edge
  // tiles may be partial (as the operand padded with zeros).
  int64_t tile_rows = 1, tile_cols = 128;
  // The tensor's amax for a whole-tensor Max scale and for NVFP4's tensor scale: < 0 measures
  // it; a given one (delayed scaling) is used as it is.
  float amax = -1;
  // Stochastic rounding: element i (row-major) draws uniform_at(sr_key, i). Else nearest even.
  bool stochastic = false;
  uint64_t sr_key = 0;
};

// Each value v of a group quantises as round(v * to_element) * from_element.
struct GroupScales {
  float to_element, from_element;
};

// The magnitude of a scaled value from which it saturates (largest + half the spacing).
LOOM_HD inline float quant_overflow(QuantElement e) {
  return e == QuantElement::E4M3 ? 464.0f : e == QuantElement::E5M2 ? 61440.0f : 7.0f;
}

// Round x to the element format (saturating), nearest even when u < 0, else up when u is below
// the fraction of the spacing that |x| lies above the value below. NaN stays NaN (E2M1, which
// has none, gives 0: its scale carries the NaN); E5M2 keeps infinities. Every step is exact.
LOOM_HD inline float quant_round(QuantElement e, float x, float u) {
  const int mbits = e == QuantElement::E4M3 ? 3 : e == QuantElement::E5M2 ? 2 : 1;
  const int emin = e == QuantElement::E4M3 ? -6 : e == QuantElement::E5M2 ? -14 : 0;
  const float max = e == QuantElement::E4M3 ? 448.0f : e == QuantElement::E5M2 ? 57344.0f : 6.0f;
  if (isnan(x)) return e == QuantElement::E2M1 ? 0.0f : x;
  if (isinf(x) && e == QuantElement::E5M2) return x;
  const float a = fminf(fabsf(x), max);
  const int exponent = int(f32_bits(a) >> 23) - 127;
  const int k = (exponent > emin ? exponent : emin) - mbits;  // the spacing 2^k around a
  const float to_steps = f32_from_bits(uint32_t(127 - k) << 23);
  const float spacing = f32_from_bits(uint32_t(127 + k) << 23);
  const float steps = a * to_steps, below = floorf(steps);
  const float whole = u < 0 ? rintf(steps) : below + (u < steps - below ? 1.0f : 0.0f);
  return copysignf(fminf(whole * spacing, max), x);
}

// 2^e for e in [-127, 127] (2^-127 is subnormal).
LOOM_HD inline float quant_power_of_two(int e) {
  return e < -126 ? ldexpf(1.0f, e) : f32_from_bits(uint32_t(e + 127) << 23);
}

// A group's scales from its amax (NaN-free) and whether all its values are finite.
LOOM_HD inline GroupScales group_scales(const BlockQuantizeSpec& s, float amax, bool finite,
                                        float tensor_scale) {
  if (!finite) return {NAN, NAN};
  if (s.scale == GroupScale::E8M0) {
    const int emax = s.element == QuantElement::E4M3 ? 8 : s.element == QuantElement::E5M2 ? 15 : 2;
    int x = -127;
    if (amax > 0) {
      const int biased = int(f32_bits(amax) >> 23);
      x = (biased > 0 ? biased - 127 : ilogbf(amax)) - emax;
      x = x < -127 ? -127 : (x > 127 ? 127 : x);
    }
    return {quant_power_of_two(-x), quant_power_of_two(x)};
  }
  if (s.scale == GroupScale::Nvfp4) {
    const float b = quant_round(QuantElement::E4M3, amax / 6.0f * tensor_scale, -1.0f);
    return {b > 0 ? tensor_scale / b : 0.0f, b / tensor_scale};
  }
  const double max = s.element == QuantElement::E4M3   ? 448.0
                     : s.element == QuantElement::E5M2 ? 57344.0
                                                       : 6.0;
  const float scale = amax > 0 ? float(max / double(amax)) : 1.0f;
  return {scale, 1.0f / scale};
}

// One run of 16 values of a row (values [b, b + 16) of `row`, zeros past `cols`) rotated into
// out[0, 16): times diag(signs), the fast Walsh-Hadamard butterflies in a fixed order, / 4.
LOOM_HD inline void hadamard16_run(const float* row, int64_t cols, int64_t b, const float* signs,
                                   float* out) {
  float v[16];
  for (int i = 0; i < 16; ++i)  // the padding's zeros take their signs too
    v[i] = (b + i < cols ? row[b + i] : 0.0f) * signs[i];
  for (int h = 1; h < 16; h *= 2)
    for (int i = 0; i < 16; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float p = v[j], q = v[j + h];
        v[j] = p + q;
        v[j + h] = p - q;
      }
  for (int i = 0; i < 16; ++i) out[i] = v[i] * 0.25f;
}

// NVFP4's tensor scale from the tensor's amax.
LOOM_HD inline float nvfp4_tensor_scale(float amax) {
  return amax > 0 ? float(6.0 * 448.0 / double(amax)) : 1.0f;
}

}  // namespace loom
