// Softmax / log-softmax over rows, and the fused cross-entropy that never materialises them.
#include <cmath>
#include <limits>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/vec_math.h"

namespace loom {

namespace {

// log(sum(exp(row))) computed stably in f32.
template <typename T>
float row_logsumexp(const T* row, int64_t n) {
  const float m = cpu::lane_max(row, n);
  if (std::isinf(m)) return m;  // all -inf (or +inf present)
  return m + std::log(cpu::lane_sum_exp(row, n, m));
}

}  // namespace

void CpuBackend::softmax_forward(const Tensor& x, bool log, const Tensor& y) {
  const int64_t rows = x.size(0), n = x.size(1);
  cpu::dispatch_float(x.dtype(), "softmax", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    cpu::parallel_for(rows, 20 * n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = xp + r * n;
        T* out = yp + r * n;
        const float lse = row_logsumexp(row, n);
        if (log) {
          for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(to_f32(row[i]) - lse);
        } else {
          for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(cpu::fast_exp(to_f32(row[i]) - lse));
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& gy, bool log, const Tensor& gx) {
  const int64_t rows = y.size(0), n = y.size(1);
  cpu::dispatch_float(y.dtype(), "softmax_backward", [&](auto z) {
    using T = decltype(z);
    const T* yp = static_cast<const T*>(y.data_ptr());
    const T* gp = static_cast<const T*>(gy.data_ptr());
    T* gxp = static_cast<T*>(gx.data_ptr());
    cpu::parallel_for(rows, 20 * n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* yr = yp + r * n;
        const T* gr = gp + r * n;
        T* out = gxp + r * n;
        if (log) {
          // y = x - lse: gx = g - softmax * sum(g)
          float sg = 0.0f;
          for (int64_t i = 0; i < n; ++i) sg += to_f32(gr[i]);
          for (int64_t i = 0; i < n; ++i)
            out[i] = from_f32<T>(to_f32(gr[i]) - cpu::fast_exp(to_f32(yr[i])) * sg);
        } else {
          // gx = y * (g - sum(g * y))
          float dot = 0.0f;
          for (int64_t i = 0; i < n; ++i) dot += to_f32(gr[i]) * to_f32(yr[i]);
          for (int64_t i = 0; i < n; ++i)
            out[i] = from_f32<T>(to_f32(yr[i]) * (to_f32(gr[i]) - dot));
        }
      }
    });
  });
}

void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                       int64_t ignore_index, const Tensor& loss,
                                       const Tensor& lse) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const int64_t* tp = targets.data<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    LOOM_CHECK(tp[r] == ignore_index || (tp[r] >= 0 && tp[r] < V))
        << "cross_entropy: target " << tp[r] << " at position " << r << " is outside [0, " << V
        << ") and is not ignore_index (" << ignore_index << ")";
  cpu::dispatch_float(logits.dtype(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    const T* lp = static_cast<const T*>(logits.data_ptr());
    float* out = loss.data<float>();
    float* lsep = lse.data<float>();
    cpu::parallel_for(N, 20 * V, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = lp + r * V;
        lsep[r] = row_logsumexp(row, V);
        out[r] = tp[r] == ignore_index ? 0.0f : lsep[r] - to_f32(row[tp[r]]);
      }
    });
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        int64_t ignore_index, const Tensor& lse,
                                        const Tensor& gloss, const Tensor& glogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const int64_t* tp = targets.data<int64_t>();
  const float* lsep = lse.data<float>();
  const float* gp = gloss.data<float>();
  cpu::dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto z) {
    using T = decltype(z);
    const T* lp = static_cast<const T*>(logits.data_ptr());
    T* gl = static_cast<T*>(glogits.data_ptr());
    cpu::parallel_for(N, 15 * V, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* out = gl + r * V;
        if (tp[r] == ignore_index) {
          for (int64_t i = 0; i < V; ++i) out[i] = from_f32<T>(0.0f);
          continue;
        }
        const T* row = lp + r * V;
        const float g = gp[r], l = lsep[r];
        for (int64_t i = 0; i < V; ++i) out[i] = from_f32<T>(g * cpu::fast_exp(to_f32(row[i]) - l));
        out[tp[r]] = from_f32<T>(to_f32(out[tp[r]]) - g);
      }
    });
  });
}

}  // namespace loom
