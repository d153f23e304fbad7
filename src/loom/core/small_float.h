// Bit-exact conversions between f32 and the small float formats (f16, fp8), inline and
// callable from device code, so that every backend rounds exactly as the CPU does.
#pragma once
#include <math.h>

#include <cstdint>

#include "loom/core/host_device.h"

namespace loom {

LOOM_HD inline uint32_t f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
#endif
}
LOOM_HD inline float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
#endif
}

// A small IEEE-like binary float with `ebits` exponent and `mbits` mantissa bits.
// Decoding is exact. Encoding rounds to nearest, ties to even, on the f32 bit pattern.
// `has_inf`: the all-ones exponent encodes inf/NaN (IEEE). Without it (E4M3fn) only
// S.1111.111 is NaN and the top exponent holds normal numbers; overflow saturates.
LOOM_HD inline float small_float_decode(uint32_t bits, int ebits, int mbits, bool has_inf) {
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t sign = (bits >> (ebits + mbits)) & 1u;
  const uint32_t exp = (bits >> mbits) & ((1u << ebits) - 1);
  const uint32_t man = bits & ((1u << mbits) - 1);
  float value;
  const uint32_t exp_max = (1u << ebits) - 1;
  if (has_inf && exp == exp_max) {
    value = man == 0 ? INFINITY : NAN;
  } else if (!has_inf && exp == exp_max && man == (1u << mbits) - 1) {
    value = NAN;
  } else if (exp == 0) {
    value = ldexpf(float(man), 1 - bias - mbits);
  } else {
    value = ldexpf(float(man | (1u << mbits)), int(exp) - bias - mbits);
  }
  return sign ? -value : value;
}

LOOM_HD inline uint32_t small_float_encode(float x, int ebits, int mbits, bool has_inf) {
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 31) << (ebits + mbits);
  const uint32_t abs = u & 0x7fffffffu;
  const uint32_t exp_max = (1u << ebits) - 1;
  const uint32_t nan_bits = has_inf ? ((exp_max << mbits) | (1u << (mbits - 1)))
                                    : ((exp_max << mbits) | ((1u << mbits) - 1));
  if (abs > 0x7f800000u) return sign | nan_bits;
  // Largest finite magnitude, as bits of the small format (without sign).
  const uint32_t max_bits = has_inf ? (((exp_max - 1) << mbits) | ((1u << mbits) - 1))
                                    : ((exp_max << mbits) | ((1u << mbits) - 2));
  const uint32_t inf_bits = exp_max << mbits;
  if (abs == 0x7f800000u) return sign | (has_inf ? inf_bits : max_bits);
  const int e = int(abs >> 23) - 127;  // unbiased f32 exponent (denormal f32 -> -127)
  const int min_normal_exp = 1 - bias;
  uint32_t result;
  if (e < min_normal_exp) {
    // Subnormal in the small format: value = m * 2^(min_normal_exp - mbits), m integer.
    // Shift the f32 significand (with implicit bit) right and round to nearest even.
    if (abs < 0x00800000u) return sign;  // f32 denormals are far below every small subnormal
    const uint32_t sig = (abs & 0x7fffffu) | 0x800000u;
    const int shift = (23 - mbits) + (min_normal_exp - e);
    if (shift > 31) return sign;
    uint32_t m = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) m++;
    result = m;  // m == 2^mbits rolls into the smallest normal, which is the right encoding
  } else {
    const int shift = 23 - mbits;
    uint32_t r = ((uint32_t(e + bias) << 23) | (abs & 0x7fffffu));  // rebias in place
    const uint32_t rem = r & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    r >>= shift;
    if (rem > half || (rem == half && (r & 1u))) r++;
    result = r;
  }
  if (result > max_bits) result = has_inf ? inf_bits : max_bits;
  return sign | result;
}


}  // namespace loom
