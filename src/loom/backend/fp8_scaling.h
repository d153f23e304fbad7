// fp8 with one scale per tensor, as both backends compute it (Backend::fp8_quantize): the
// scale that maps a tensor's amax to the format's largest value, and the saturating cast of a
// scaled value. The recipes' own emulation (precision/quantize.h) is the independent reference
// the tests hold these against.
#pragma once
#include <cmath>
#include <cstdint>

#include "loom/core/dtype.h"
#include "loom/core/host_device.h"

namespace loom {

// The largest finite value of E4M3 (448) or E5M2 (57344).
LOOM_HD inline float fp8_max(bool e4m3) {
  return e4m3 ? 448.0f : 57344.0f;
}

// x * scale maps amax onto the largest value (scale 1 for an all-zero tensor); a tensor with a
// non-finite value gets NaN, so that every code of it is NaN and the step guard sees it.
LOOM_HD inline float fp8_scale(float amax, bool e4m3, bool finite) {
  if (!finite) return NAN;
  return amax > 0 ? float(double(fp8_max(e4m3)) / double(amax)) : 1.0f;
}

// Whether a scaled value lies beyond what rounds to a finite code (the largest plus half the
// spacing there): such values are clamped and counted as saturated.
LOOM_HD inline bool fp8_saturates(float scaled, bool e4m3) {
  return fabsf(scaled) >= (e4m3 ? 464.0f : 61440.0f);
}

// The code of a scaled value: clamped to the largest finite magnitude, then rounded to nearest
// even. NaN stays NaN; E5M2 keeps an infinity (as the recipes' emulation does).
LOOM_HD inline uint8_t fp8_encode_saturating(float scaled, bool e4m3) {
  const float max = fp8_max(e4m3);
  float v = scaled;
  if (fabsf(v) > max && (e4m3 || !isinf(v))) v = copysignf(max, v);  // false for NaN
  return e4m3 ? to_f8e4m3(v).bits : to_f8e5m2(v).bits;
}

LOOM_HD inline float fp8_decode(uint8_t code, bool e4m3) {
  return e4m3 ? to_f32(f8e4m3{code}) : to_f32(f8e5m2{code});
}

}  // namespace loom
