// Optimizer update kernels: one pass over flat f32 parameter, gradient and state buffers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/kernel_checks.h"

namespace loom {

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                            double eps, double weight_decay, int64_t step, double grad_scale) {
  check_f32_like("adamw", param, grad);
  check_f32_like("adamw", param, exp_avg);
  check_f32_like("adamw", param, exp_avg_sq);
  LOOM_CHECK(step >= 1) << "adamw: step count starts at 1, got " << step;
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const float b1 = float(beta1), b2 = float(beta2);
  const float c1 = float(1.0 / (1.0 - std::pow(beta1, double(step))));
  const float c2_sqrt = float(1.0 / std::sqrt(1.0 - std::pow(beta2, double(step))));
  // Decay as p - (lr wd) p: 1 - lr wd rounded to f32 would be off by up to 1% for small lr wd.
  const float step_size = float(lr), decay = float(lr * weight_decay), e = float(eps);
  const float scale = float(grad_scale);  // rounded as the separate clipping pass (axpby) did
  cpu::parallel_for(param.numel(), 12, [&](int64_t begin, int64_t end) {
  // simd: the four buffers never alias, which the compiler cannot prove; vectorised sqrt and
  // divide make the update memory-bound instead of bound by scalar math (2.3x faster).
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float gi = scale * g[i];
      const float mi = b1 * m[i] + (1.0f - b1) * gi;
      const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) * c2_sqrt + e;
      p[i] = p[i] - decay * p[i] - step_size * (mi * c1) / denom;
    }
  });
}

void CpuBackend::axpby(const Tensor& y, const Tensor& x, double a, double b) {
  check_f32_like("axpby", y, x);
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const float fa = float(a), fb = float(b);
  cpu::parallel_for(y.numel(), 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) yp[i] = fa * yp[i] + fb * xp[i];
  });
}

double CpuBackend::sum_squares(const Tensor& x) {
  LOOM_CHECK(x.dtype() == DType::F32 && x.is_contiguous())
      << "sum_squares: expected a contiguous f32 tensor, got " << dtype_name(x.dtype()) << " "
      << x.shape();
  const float* p = x.data<float>();
  const int64_t n = x.numel(), run = 1024;  // f32 partial sums over runs of 1024 (vectorised)
  const int64_t runs = (n + run - 1) / run;
  // Each run's partial goes to its own slot and the slots are added in order: the result does
  // not depend on the thread count or on which thread finishes first.
  std::vector<double> partial(static_cast<size_t>(runs));
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t r = 0; r < runs; ++r) {
    const int64_t begin = r * run, end = std::min(n, begin + run);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += p[i] * p[i];
    partial[size_t(r)] = double(s);
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace loom
