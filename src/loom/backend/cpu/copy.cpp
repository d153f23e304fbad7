// copy (with dtype conversion) and fill.
#include <cstring>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/strided.h"

namespace loom {

namespace {

// Element conversion through f32 for floats, through i64 for integers.
template <typename T>
struct Elem {
  static float get(const T& v) { return to_f32(v); }
  static T put(float v) { return from_f32<T>(v); }
};
template <>
struct Elem<f8e4m3> {
  static float get(const f8e4m3& v) { return to_f32(v); }
  static f8e4m3 put(float v) { return to_f8e4m3(v); }
};
template <>
struct Elem<f8e5m2> {
  static float get(const f8e5m2& v) { return to_f32(v); }
  static f8e5m2 put(float v) { return to_f8e5m2(v); }
};
template <typename I>
struct IntElem {
  static double get(const I& v) { return double(v); }
  static I put(double v) { return I(v); }
};
template <>
struct Elem<int32_t> : IntElem<int32_t> {};
template <>
struct Elem<int64_t> : IntElem<int64_t> {};
template <>
struct Elem<uint8_t> : IntElem<uint8_t> {};

template <typename S, typename D>
void copy_typed(const Tensor& src, const Tensor& dst) {
  auto L = cpu::coalesce<2>(dst.shape(), {&src.strides(), &dst.strides()});
  const S* s = static_cast<const S*>(src.data_ptr());
  D* d = static_cast<D*>(dst.data_ptr());
  cpu::for_each_row(L, 1, [&](auto off, int64_t n, auto st) {
    const S* sp = s + off[0];
    D* dp = d + off[1];
    if constexpr (std::is_same_v<S, D>) {
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(dp, sp, size_t(n) * sizeof(S));
        return;
      }
      for (int64_t i = 0; i < n; ++i) dp[i * st[1]] = sp[i * st[0]];
    } else {
      for (int64_t i = 0; i < n; ++i) dp[i * st[1]] = Elem<D>::put(Elem<S>::get(sp[i * st[0]]));
    }
  });
}

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

}  // namespace

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  LOOM_CHECK(src.shape() == dst.shape())
      << "copy: source " << src.shape() << " and destination " << dst.shape() << " differ";
  if (src.numel() == 0) return;
  LOOM_CHECK(src.device().type == DeviceType::CPU && dst.device().type == DeviceType::CPU)
      << "copy: the CPU backend copies between host tensors only (got " << src.device().str()
      << " -> " << dst.device().str() << ")";
  dispatch_any(src.dtype(), [&](auto s) {
    dispatch_any(dst.dtype(), [&](auto d) { copy_typed<decltype(s), decltype(d)>(src, dst); });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  LOOM_CHECK(dst.is_contiguous()) << "fill: destination " << dst.shape() << " not contiguous";
  const int64_t n = dst.numel();
  dispatch_any(dst.dtype(), [&](auto z) {
    using T = decltype(z);
    T v;
    if constexpr (std::is_integral_v<T>) {
      v = T(value);
    } else {
      v = Elem<T>::put(float(value));
    }
    T* p = static_cast<T*>(dst.data_ptr());
    cpu::parallel_for(n, 1, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
}

}  // namespace loom
