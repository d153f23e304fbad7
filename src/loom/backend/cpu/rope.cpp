// Rotary position embedding; the backward is the same rotation by the negative angle.
#include <cmath>
#include <vector>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"

namespace loom {

void CpuBackend::rope(const Tensor& x, const Tensor& positions, double theta,
                      const RopeScaling& scaling, bool inverse, const Tensor& out) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), half = D / 2;
  const int64_t* pos = positions.data<int64_t>();
  // cos/sin table (T, half), computed in f64 so large positions keep their accuracy.
  std::vector<float> cos_t(static_cast<size_t>(T * half)), sin_t(size_t(T * half));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(pos[t]) * rope_frequency(theta, scaling, i, D);
      cos_t[size_t(t * half + i)] = float(std::cos(angle));
      sin_t[size_t(t * half + i)] = float(inverse ? -std::sin(angle) : std::sin(angle));
    }
  cpu::dispatch_float(x.dtype(), "rope", [&](auto z) {
    using E = decltype(z);
    const E* xp = static_cast<const E*>(x.data_ptr());
    E* op = static_cast<E*>(out.data_ptr());
    cpu::parallel_for(B * H * T, 4 * D, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t t = row % T;
        const E* xr = xp + row * D;
        E* orow = op + row * D;
        const float* c = cos_t.data() + t * half;
        const float* s = sin_t.data() + t * half;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = to_f32(xr[i]), x2 = to_f32(xr[i + half]);
          orow[i] = from_f32<E>(x1 * c[i] - x2 * s[i]);
          orow[i + half] = from_f32<E>(x2 * c[i] + x1 * s[i]);
        }
      }
    });
  });
}

}  // namespace loom
