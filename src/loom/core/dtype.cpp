#include "loom/core/dtype.h"

#include <cmath>

#include "loom/core/error.h"

namespace loom {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::F8E4M3:
      return 1;
    case DType::F8E5M2:
      return 1;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
  }
  LOOM_FAIL() << "bad dtype " << int(dtype);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::F8E4M3:
      return "f8e4m3";
    case DType::F8E5M2:
      return "f8e5m2";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
  }
  return "?";
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 ||
         dtype == DType::F8E4M3 || dtype == DType::F8E5M2;
}

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::I32,
                  DType::I64, DType::U8}) {
    if (name == dtype_name(d)) return d;
  }
  LOOM_FAIL() << "unknown dtype '" << name
              << "' (expected one of f32, bf16, f16, f8e4m3, f8e5m2, i32, i64, u8)";
}

namespace {

// A small IEEE-like binary float with `ebits` exponent and `mbits` mantissa bits.
// Decoding is exact. Encoding rounds to nearest, ties to even, on the f32 bit pattern.
// `has_inf`: the all-ones exponent encodes inf/NaN (IEEE). Without it (E4M3fn) only
// S.1111.111 is NaN and the top exponent holds normal numbers; overflow saturates.
float small_float_decode(uint32_t bits, int ebits, int mbits, bool has_inf) {
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
    value = std::ldexp(float(man), 1 - bias - mbits);
  } else {
    value = std::ldexp(float(man | (1u << mbits)), int(exp) - bias - mbits);
  }
  return sign ? -value : value;
}

uint32_t small_float_encode(float x, int ebits, int mbits, bool has_inf) {
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

}  // namespace

float to_f32(f16 x) {
  return small_float_decode(x.bits, 5, 10, true);
}
f16 to_f16(float x) {
  return f16{uint16_t(small_float_encode(x, 5, 10, true))};
}
float to_f32(f8e4m3 x) {
  return small_float_decode(x.bits, 4, 3, false);
}
f8e4m3 to_f8e4m3(float x) {
  return f8e4m3{uint8_t(small_float_encode(x, 4, 3, false))};
}
float to_f32(f8e5m2 x) {
  return small_float_decode(x.bits, 5, 2, true);
}
f8e5m2 to_f8e5m2(float x) {
  return f8e5m2{uint8_t(small_float_encode(x, 5, 2, true))};
}

}  // namespace loom
