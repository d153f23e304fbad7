// adaLN modulation x * (1 + scale) + shift with per-sample (B, C) shift and scale.
#include <vector>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"

namespace loom {

void CpuBackend::modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                  const Tensor& out) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  cpu::dispatch_float(x.dtype(), "modulate", [&](auto z) {
    using E = decltype(z);
    const E* xp = static_cast<const E*>(x.data_ptr());
    const E* sh = static_cast<const E*>(shift.data_ptr());
    const E* sc = static_cast<const E*>(scale.data_ptr());
    E* op = static_cast<E*>(out.data_ptr());
    cpu::parallel_for(B * T, 2 * C, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t n = row / T;
        const E* xr = xp + row * C;
        E* orow = op + row * C;
        for (int64_t c = 0; c < C; ++c)
          orow[c] = from_f32<E>(to_f32(xr[c]) * (1.0f + to_f32(sc[n * C + c])) + to_f32(sh[n * C + c]));
      }
    });
  });
}

void CpuBackend::modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& gout,
                                   const Tensor& gx, const Tensor& gshift, const Tensor& gscale) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  cpu::dispatch_float(x.dtype(), "modulate_backward", [&](auto z) {
    using E = decltype(z);
    const E* xp = static_cast<const E*>(x.data_ptr());
    const E* sc = static_cast<const E*>(scale.data_ptr());
    const E* gp = static_cast<const E*>(gout.data_ptr());
    E* gxp = static_cast<E*>(gx.data_ptr());
    E* gsh = static_cast<E*>(gshift.data_ptr());
    E* gsc = static_cast<E*>(gscale.data_ptr());
    // Parallel over (sample, channel block): each output element of gshift/gscale is owned
    // by one thread, which walks the T rows of its sample.
    cpu::parallel_for(B, 4 * T * C, [&](int64_t b0, int64_t b1) {
      std::vector<float> acc_shift(static_cast<size_t>(C)), acc_scale(static_cast<size_t>(C));
      for (int64_t n = b0; n < b1; ++n) {
        std::fill(acc_shift.begin(), acc_shift.end(), 0.0f);
        std::fill(acc_scale.begin(), acc_scale.end(), 0.0f);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t row = n * T + t;
          for (int64_t c = 0; c < C; ++c) {
            const float g = to_f32(gp[row * C + c]);
            acc_shift[c] += g;
            acc_scale[c] += g * to_f32(xp[row * C + c]);
            gxp[row * C + c] = from_f32<E>(g * (1.0f + to_f32(sc[n * C + c])));
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          gsh[n * C + c] = from_f32<E>(acc_shift[c]);
          gsc[n * C + c] = from_f32<E>(acc_scale[c]);
        }
      }
    });
  });
}

}  // namespace loom
