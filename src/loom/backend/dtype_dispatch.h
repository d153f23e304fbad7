// Choosing a kernel template by element type, and element conversion as every backend does it:
// floats through f32 (RNE, E4M3 saturating), integers through double. Device code may use
// the conversions (LOOM_HD).
#pragma once
#include <cstdint>

#include "loom/core/dtype.h"
#include "loom/core/error.h"

namespace loom {

// fn is called with a value of the element type (float, bf16 or f16) to select the template.
template <typename Fn>
void dispatch_float(DType dtype, const char* kernel, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::BF16:
      fn(bf16{});
      return;
    case DType::F16:
      fn(f16{});
      return;
    default:
      LOOM_FAIL() << kernel << ": unsupported dtype " << dtype_name(dtype)
                  << " (expected f32, bf16 or f16)";
  }
}

// The same over every dtype.
template <typename Fn>
void dispatch_any(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::BF16:
      fn(bf16{});
      return;
    case DType::F16:
      fn(f16{});
      return;
    case DType::F8E4M3:
      fn(f8e4m3{});
      return;
    case DType::F8E5M2:
      fn(f8e5m2{});
      return;
    case DType::I32:
      fn(int32_t{});
      return;
    case DType::I64:
      fn(int64_t{});
      return;
    case DType::U8:
      fn(uint8_t{});
      return;
  }
}

// Elem<D>::put(Elem<S>::get(v)) converts an element of type S to type D.
template <typename T>
struct Elem {
  LOOM_HD static float get(const T& v) { return to_f32(v); }
  LOOM_HD static T put(float v) { return from_f32<T>(v); }
};
template <>
struct Elem<f8e4m3> {
  LOOM_HD static float get(const f8e4m3& v) { return to_f32(v); }
  LOOM_HD static f8e4m3 put(float v) { return to_f8e4m3(v); }
};
template <>
struct Elem<f8e5m2> {
  LOOM_HD static float get(const f8e5m2& v) { return to_f32(v); }
  LOOM_HD static f8e5m2 put(float v) { return to_f8e5m2(v); }
};
template <typename I>
struct IntElem {
  LOOM_HD static double get(const I& v) { return double(v); }
  LOOM_HD static I put(double v) { return I(v); }
};
template <>
struct Elem<int32_t> : IntElem<int32_t> {};
template <>
struct Elem<int64_t> : IntElem<int64_t> {};
template <>
struct Elem<uint8_t> : IntElem<uint8_t> {};

}  // namespace loom
