// The element and scale formats of low-precision training, bit-exact to their specifications:
// OCP 8-bit floating point (E4M3 "fn": bias 7, max 448, no infinity, NaN = S.1111.111; E5M2:
// bias 15, IEEE-like), OCP Microscaling v1.0's FP4 E2M1 (bias 1, max 6, no infinity, no NaN)
// and E8M0 scales (2^(code - 127), 0xFF = NaN, no sign, no zero).
//
// Conversions saturate (a finite value beyond the largest finite one becomes it, as the MX
// spec prescribes for scaled elements and fp8 training recipes do) and round to nearest, ties
// to even, or stochastically: up with probability equal to the distance from the value below,
// measured in units of the format's spacing there, so the rounding is unbiased.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace loom::precision {

enum class Element : uint8_t { E4M3, E5M2, E2M1 };
const char* element_name(Element e);
double element_max(Element e);  // 448, 57344, 6
int element_emax(Element e);    // exponent of the largest power of two: 8, 15, 2 (MX's emax)
// The magnitude from which values no longer round to a finite one but saturate: the largest
// plus half the spacing there (464, 61440, 7).
double element_overflow(Element e);

// Rounding: u < 0 is round-to-nearest-even; u in [0, 1) is stochastic rounding with that draw
// (round up when u < the fraction of the spacing that the value lies above the one below).
// NaN goes to NaN where the format has one (E2M1 has none: 0, and its block scale carries the
// NaN); infinity saturates, except in E5M2, which keeps it.
uint8_t encode(Element e, float x, float u = -1.0f);
float decode(Element e, uint8_t code);
inline float round_to(Element e, float x, float u = -1.0f) {
  return decode(e, encode(e, x, u));
}

// round_to computed in f32 without the codes, for the emulated GEMM operands: the same value
// (bit for bit, tested against the codec; NaN where the codec gives NaN). Every step is exact:
// the spacing around |x| is a power of two, |x| / spacing an f32 with few integer bits.
template <Element E>
inline float round_to_element(float x, float u) {
  constexpr int mbits = E == Element::E4M3 ? 3 : E == Element::E5M2 ? 2 : 1;
  constexpr int emin = E == Element::E4M3 ? -6 : E == Element::E5M2 ? -14 : 0;  // 1 - bias
  constexpr float max = E == Element::E4M3 ? 448.0f : E == Element::E5M2 ? 57344.0f : 6.0f;
  // Without branches on the value, so that loops over operands vectorise: saturation is a
  // clamp, and the specials are chosen at the end.
  const float a = std::min(std::fabs(x), max);
  uint32_t bits;
  std::memcpy(&bits, &a, 4);
  const int k = std::max(int(bits >> 23) - 127, emin) - mbits;  // spacing 2^k around a
  const uint32_t up = uint32_t(127 - k) << 23, down = uint32_t(127 + k) << 23;
  float to_steps, spacing;
  std::memcpy(&to_steps, &up, 4);
  std::memcpy(&spacing, &down, 4);
  const float steps = a * to_steps, below = std::floor(steps);
  // Ties to even (the default rounding mode), or up when the draw is under the fraction above.
  const float whole = u < 0 ? std::nearbyint(steps) : below + (u < steps - below ? 1.0f : 0.0f);
  float r = std::copysign(std::min(whole * spacing, max), x);
  if (E == Element::E5M2) r = std::isinf(x) ? x : r;  // E5M2 keeps infinities
  return std::isnan(x) ? (E == Element::E2M1 ? 0.0f : x) : r;
}

inline float round_to_fast(Element e, float x, float u = -1.0f) {
  switch (e) {
    case Element::E4M3:
      return round_to_element<Element::E4M3>(x, u);
    case Element::E5M2:
      return round_to_element<Element::E5M2>(x, u);
    case Element::E2M1:
      return round_to_element<Element::E2M1>(x, u);
  }
  return x;
}

// E8M0: 2^exponent for exponent in [-127, 127]; decode(0xFF) is NaN.
uint8_t encode_e8m0(int exponent);
float decode_e8m0(uint8_t code);

}  // namespace loom::precision
