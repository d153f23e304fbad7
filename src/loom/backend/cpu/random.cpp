// Layout-invariant random fills: the value of an element depends on its global index only.
#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/core/rng.h"

namespace loom {

void CpuBackend::random(RandomDist dist, uint64_t key, const Shape& global_shape,
                        const Shape& start, float a, float b, const Tensor& out) {
  LOOM_CHECK(out.is_contiguous()) << "random: output must be contiguous";
  const Shape& shape = out.shape();
  const int64_t dims = out.dim();
  const Shape global_strides = contiguous_strides(global_shape);
  const int64_t n = out.numel();
  cpu::dispatch_float(out.dtype(), "random", [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(n, 200, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // Local row-major index -> global row-major index.
        int64_t rest = i, global = 0;
        for (int64_t d = dims - 1; d >= 0; --d) {
          const int64_t c = rest % shape[size_t(d)];
          rest /= shape[size_t(d)];
          global += (c + start[size_t(d)]) * global_strides[size_t(d)];
        }
        const float v = dist == RandomDist::Normal
                            ? a + b * normal_at(key, uint64_t(global))
                            : a + (b - a) * uniform_at(key, uint64_t(global));
        p[i] = from_f32<T>(v);
      }
    });
  });
}

}  // namespace loom
