// LayerNorm and RMSNorm over the last dim of (rows, C), forward and backward side by side.
// Statistics (mean, rstd) are f32 whatever the input dtype; the forward saves exactly them.
#include <cmath>
#include <vector>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/row_stats.h"

namespace loom {

namespace {

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

// Per-thread partial sums of the weight/bias gradients, reduced at the end.
struct ParamGradPartials {
  std::vector<double> data;
  int threads, C, parts;
  ParamGradPartials(int threads_, int64_t C_, int parts_)
      : data(size_t(threads_) * size_t(C_) * size_t(parts_), 0.0),
        threads(threads_),
        C(int(C_)),
        parts(parts_) {}
  double* slot(int thread, int part) { return data.data() + (size_t(thread) * parts + part) * C; }
  double total(int part, int64_t c) {
    double s = 0;
    for (int t = 0; t < threads; ++t) s += slot(t, part)[c];
    return s;
  }
};

}  // namespace

void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    float eps, const Tensor& y, const Tensor& mean,
                                    const Tensor& rstd) {
  const int64_t rows = x.size(0), C = x.size(1);
  cpu::dispatch_float(x.dtype(), "layer_norm", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = ptr_or_null<T>(weight);
    const T* bp = ptr_or_null<T>(bias);
    T* yp = static_cast<T*>(y.data_ptr());
    float* mp = mean.data<float>();
    float* rp = rstd.data<float>();
    cpu::parallel_for(rows, 8 * C, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = xp + r * C;
        float m, rs;
        cpu::layer_norm_stats(row, C, eps, m, rs);
        mp[r] = m;
        rp[r] = rs;
        T* out = yp + r * C;
        for (int64_t i = 0; i < C; ++i) {
          float n = (to_f32(row[i]) - m) * rs;
          if (wp) n *= to_f32(wp[i]);
          if (bp) n += to_f32(bp[i]);
          out[i] = from_f32<T>(n);
        }
      }
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                     const Tensor& gweight, const Tensor& gbias) {
  const int64_t rows = x.size(0), C = x.size(1);
  const int threads = omp_get_max_threads();
  const bool param_grads = gweight.defined() || gbias.defined();
  ParamGradPartials partials(param_grads ? threads : 0, C, 2);
  cpu::dispatch_float(x.dtype(), "layer_norm_backward", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = ptr_or_null<T>(weight);
    const T* gp = static_cast<const T*>(gy.data_ptr());
    T* gxp = static_cast<T*>(gx.data_ptr());
    const float* mp = mean.data<float>();
    const float* rp = rstd.data<float>();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      double* gw_acc = param_grads ? partials.slot(t, 0) : nullptr;
      double* gb_acc = param_grads ? partials.slot(t, 1) : nullptr;
      std::vector<float> xhat(static_cast<size_t>(C)), g(static_cast<size_t>(C));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = xp + r * C;
        const T* gr = gp + r * C;
        const float m = mp[r], rs = rp[r];
        // g: the gradient w.r.t. the normalised value.
        for (int64_t i = 0; i < C; ++i) g[i] = to_f32(gr[i]);
        if (wp) {
          for (int64_t i = 0; i < C; ++i) g[i] *= to_f32(wp[i]);
        }
        float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
        for (int64_t i = 0; i < C; ++i) {
          xhat[i] = (to_f32(xr[i]) - m) * rs;
          sum_g += g[i];
          sum_g_xhat += g[i] * xhat[i];
        }
        if (param_grads) {
#pragma omp simd
          for (int64_t i = 0; i < C; ++i) {
            const float go = to_f32(gr[i]);
            gw_acc[i] += double(go * xhat[i]);
            gb_acc[i] += double(go);
          }
        }
        const float a = sum_g / float(C), b = sum_g_xhat / float(C);
        T* out = gxp + r * C;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) out[i] = from_f32<T>((g[i] - a - xhat[i] * b) * rs);
      }
    }
    if (gweight.defined()) {
      T* p = static_cast<T*>(gweight.data_ptr());
      for (int64_t c = 0; c < C; ++c) p[c] = from_f32<T>(float(partials.total(0, c)));
    }
    if (gbias.defined()) {
      T* p = static_cast<T*>(gbias.data_ptr());
      for (int64_t c = 0; c < C; ++c) p[c] = from_f32<T>(float(partials.total(1, c)));
    }
  });
}

void CpuBackend::rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, const Tensor& y,
                                  const Tensor& rstd) {
  const int64_t rows = x.size(0), C = x.size(1);
  cpu::dispatch_float(x.dtype(), "rms_norm", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = ptr_or_null<T>(weight);
    T* yp = static_cast<T*>(y.data_ptr());
    float* rp = rstd.data<float>();
    cpu::parallel_for(rows, 6 * C, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = xp + r * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < C; ++i) {
          const float v = to_f32(row[i]);
          ss += v * v;
        }
        const float rs = 1.0f / std::sqrt(ss / float(C) + eps);
        rp[r] = rs;
        T* out = yp + r * C;
        for (int64_t i = 0; i < C; ++i) {
          float n = to_f32(row[i]) * rs;
          if (wp) n *= to_f32(wp[i]);
          out[i] = from_f32<T>(n);
        }
      }
    });
  });
}

void CpuBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                   const Tensor& gy, const Tensor& gx, const Tensor& gweight) {
  const int64_t rows = x.size(0), C = x.size(1);
  const int threads = omp_get_max_threads();
  ParamGradPartials partials(gweight.defined() ? threads : 0, C, 1);
  cpu::dispatch_float(x.dtype(), "rms_norm_backward", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = ptr_or_null<T>(weight);
    const T* gp = static_cast<const T*>(gy.data_ptr());
    T* gxp = static_cast<T*>(gx.data_ptr());
    const float* rp = rstd.data<float>();
#pragma omp parallel num_threads(threads)
    {
      double* gw_acc = gweight.defined() ? partials.slot(omp_get_thread_num(), 0) : nullptr;
      std::vector<float> xhat(static_cast<size_t>(C)), g(static_cast<size_t>(C));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = xp + r * C;
        const T* gr = gp + r * C;
        const float rs = rp[r];
        float sum_g_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_g_xhat)
        for (int64_t i = 0; i < C; ++i) {
          xhat[i] = to_f32(xr[i]) * rs;
          const float go = to_f32(gr[i]);
          g[i] = wp ? go * to_f32(wp[i]) : go;
          sum_g_xhat += g[i] * xhat[i];
        }
        if (gw_acc) {
#pragma omp simd
          for (int64_t i = 0; i < C; ++i) gw_acc[i] += double(to_f32(gr[i]) * xhat[i]);
        }
        const float b = sum_g_xhat / float(C);
        T* out = gxp + r * C;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) out[i] = from_f32<T>((g[i] - xhat[i] * b) * rs);
      }
    }
    if (gweight.defined()) {
      T* p = static_cast<T*>(gweight.data_ptr());
      for (int64_t c = 0; c < C; ++c) p[c] = from_f32<T>(float(partials.total(0, c)));
    }
  });
}

}  // namespace loom
