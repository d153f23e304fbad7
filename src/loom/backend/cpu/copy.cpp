// copy (with dtype conversion) and fill.
#include <cstring>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/strided.h"
#include "loom/backend/dtype_dispatch.h"

namespace loom {

namespace {

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
