// The adaLN pieces of a DiT block, with per-sample (B, C) conditioning broadcast over T: the
// modulation x * (1 + scale) + shift, alone and fused with the LayerNorm (no affine) before it,
// and the gated residual x + gate * h.
#include <vector>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/row_stats.h"

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
          orow[c] =
              from_f32<E>(to_f32(xr[c]) * (1.0f + to_f32(sc[n * C + c])) + to_f32(sh[n * C + c]));
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

void CpuBackend::layer_norm_modulate_forward(const Tensor& x, const Tensor& shift,
                                             const Tensor& scale, float eps, const Tensor& y,
                                             const Tensor& mean, const Tensor& rstd) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  cpu::dispatch_float(x.dtype(), "layer_norm_modulate", [&](auto z) {
    using E = decltype(z);
    const E* xp = static_cast<const E*>(x.data_ptr());
    const E* sh = static_cast<const E*>(shift.data_ptr());
    const E* sc = static_cast<const E*>(scale.data_ptr());
    E* yp = static_cast<E*>(y.data_ptr());
    float* mp = mean.data<float>();
    float* rp = rstd.data<float>();
    cpu::parallel_for(B * T, 8 * C, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const E* xr = xp + row * C;
        const E* shr = sh + row / T * C;
        const E* scr = sc + row / T * C;
        float m, rs;
        cpu::layer_norm_stats(xr, C, eps, m, rs);
        mp[row] = m;
        rp[row] = rs;
        E* yr = yp + row * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c)
          yr[c] = from_f32<E>((to_f32(xr[c]) - m) * rs * (1.0f + to_f32(scr[c])) + to_f32(shr[c]));
      }
    });
  });
}

void CpuBackend::layer_norm_modulate_backward(const Tensor& x, const Tensor& scale,
                                              const Tensor& mean, const Tensor& rstd,
                                              const Tensor& gy, const Tensor& gx,
                                              const Tensor& gshift, const Tensor& gscale) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  cpu::dispatch_float(x.dtype(), "layer_norm_modulate_backward", [&](auto z) {
    using E = decltype(z);
    const E* xp = static_cast<const E*>(x.data_ptr());
    const E* sc = static_cast<const E*>(scale.data_ptr());
    const E* gp = static_cast<const E*>(gy.data_ptr());
    const float* mp = mean.data<float>();
    const float* rp = rstd.data<float>();
    E* gxp = static_cast<E*>(gx.data_ptr());
    E* gsh = static_cast<E*>(gshift.data_ptr());
    E* gsc = static_cast<E*>(gscale.data_ptr());
    // Parallel over samples: a sample's gshift/gscale rows are summed by one thread.
    cpu::parallel_for(B, 12 * T * C, [&](int64_t b0, int64_t b1) {
      std::vector<float> xhat(static_cast<size_t>(C)), g(static_cast<size_t>(C)),
          acc_shift(static_cast<size_t>(C)), acc_scale(static_cast<size_t>(C));
      for (int64_t n = b0; n < b1; ++n) {
        std::fill(acc_shift.begin(), acc_shift.end(), 0.0f);
        std::fill(acc_scale.begin(), acc_scale.end(), 0.0f);
        const E* scr = sc + n * C;
        for (int64_t row = n * T; row < (n + 1) * T; ++row) {
          const E* xr = xp + row * C;
          const E* gr = gp + row * C;
          const float m = mp[row], rs = rp[row];
          float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
          for (int64_t c = 0; c < C; ++c) {
            const float xh = (to_f32(xr[c]) - m) * rs, gyc = to_f32(gr[c]);
            acc_shift[c] += gyc;
            acc_scale[c] += gyc * xh;
            const float gc = gyc * (1.0f + to_f32(scr[c]));  // w.r.t. the normalised value
            xhat[c] = xh;
            g[c] = gc;
            sum_g += gc;
            sum_g_xhat += gc * xh;
          }
          const float a = sum_g / float(C), bb = sum_g_xhat / float(C);
          E* gxr = gxp + row * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) gxr[c] = from_f32<E>((g[c] - a - xhat[c] * bb) * rs);
        }
        for (int64_t c = 0; c < C; ++c) {
          gsh[n * C + c] = from_f32<E>(acc_shift[c]);
          gsc[n * C + c] = from_f32<E>(acc_scale[c]);
        }
      }
    });
  });
}

void CpuBackend::gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& h,
                                        const Tensor& out) {
  const int64_t T = x.size(1), C = x.size(2), rows = x.size(0) * T;
  cpu::dispatch_float(x.dtype(), "gated_residual", [&](auto z) {
    using E = decltype(z);
    const E* xp = static_cast<const E*>(x.data_ptr());
    const E* gp = static_cast<const E*>(gate.data_ptr());
    const E* hp = static_cast<const E*>(h.data_ptr());
    E* op = static_cast<E*>(out.data_ptr());
    cpu::parallel_for(rows, 2 * C, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const E* gr = gp + row / T * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c)
          op[row * C + c] =
              from_f32<E>(to_f32(xp[row * C + c]) + to_f32(gr[c]) * to_f32(hp[row * C + c]));
      }
    });
  });
}

void CpuBackend::gated_residual_backward(const Tensor& h, const Tensor& gate, const Tensor& gout,
                                         const Tensor& gh, const Tensor& ggate) {
  const int64_t B = h.size(0), T = h.size(1), C = h.size(2);
  cpu::dispatch_float(h.dtype(), "gated_residual_backward", [&](auto z) {
    using E = decltype(z);
    const E* hp = static_cast<const E*>(h.data_ptr());
    const E* gp = static_cast<const E*>(gate.data_ptr());
    const E* gop = static_cast<const E*>(gout.data_ptr());
    E* ghp = static_cast<E*>(gh.data_ptr());
    E* ggp = static_cast<E*>(ggate.data_ptr());
    // Parallel over samples: a sample's ggate row is summed by one thread.
    cpu::parallel_for(B, 3 * T * C, [&](int64_t b0, int64_t b1) {
      std::vector<float> acc(static_cast<size_t>(C));
      for (int64_t n = b0; n < b1; ++n) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        const E* gr = gp + n * C;
        for (int64_t row = n * T; row < (n + 1) * T; ++row) {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const float g = to_f32(gop[row * C + c]);
            acc[c] += g * to_f32(hp[row * C + c]);
            ghp[row * C + c] = from_f32<E>(g * to_f32(gr[c]));
          }
        }
        for (int64_t c = 0; c < C; ++c) ggp[n * C + c] = from_f32<E>(acc[c]);
      }
    });
  });
}

}  // namespace loom
