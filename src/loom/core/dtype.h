// Element types and the exact conversions between them and f32.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "loom/core/small_float.h"

namespace loom {

enum class DType : uint8_t { F32, BF16, F16, F8E4M3, F8E5M2, I32, I64, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
bool is_floating(DType dtype);                   // f32, bf16, f16 and the fp8 storage types
DType dtype_from_name(const std::string& name);  // "f32", "bf16", ... ; throws on unknown

// Storage-only 16-bit and 8-bit float types. Arithmetic happens in f32.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};
struct f8e4m3 {
  uint8_t bits;
};
struct f8e5m2 {
  uint8_t bits;
};

// bf16 is the top half of an f32: widening is exact, narrowing rounds to nearest even.
LOOM_HD inline float to_f32(bf16 x) {
  return f32_from_bits(uint32_t(x.bits) << 16);
}
LOOM_HD inline bf16 to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// IEEE binary16; overflow rounds to infinity as the format has one.
LOOM_HD inline float to_f32(f16 x) {
  return small_float_decode(x.bits, 5, 10, true);
}
LOOM_HD inline f16 to_f16(float x) {
  return f16{uint16_t(small_float_encode(x, 5, 10, true))};
}
// OCP FP8 E4M3 ("fn"): bias 7, no infinity, max 448, NaN = S.1111.111. Overflow saturates to +-448.
LOOM_HD inline float to_f32(f8e4m3 x) {
  return small_float_decode(x.bits, 4, 3, false);
}
LOOM_HD inline f8e4m3 to_f8e4m3(float x) {
  return f8e4m3{uint8_t(small_float_encode(x, 4, 3, false))};
}
// OCP FP8 E5M2: bias 15, IEEE-like with infinity; overflow rounds to infinity (RNE).
LOOM_HD inline float to_f32(f8e5m2 x) {
  return small_float_decode(x.bits, 5, 2, true);
}
LOOM_HD inline f8e5m2 to_f8e5m2(float x) {
  return f8e5m2{uint8_t(small_float_encode(x, 5, 2, true))};
}

LOOM_HD inline float to_f32(float x) {
  return x;
}
template <typename T>
LOOM_HD T from_f32(float x);
template <>
LOOM_HD inline float from_f32<float>(float x) {
  return x;
}
template <>
LOOM_HD inline bf16 from_f32<bf16>(float x) {
  return to_bf16(x);
}
template <>
LOOM_HD inline f16 from_f32<f16>(float x) {
  return to_f16(x);
}

}  // namespace loom
