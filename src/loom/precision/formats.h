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
#include <cstdint>

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

// E8M0: 2^exponent for exponent in [-127, 127]; decode(0xFF) is NaN.
uint8_t encode_e8m0(int exponent);
float decode_e8m0(uint8_t code);

}  // namespace loom::precision
