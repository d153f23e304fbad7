// Rotary embedding and SwiGLU, forward and backward; AdamW, axpby.
#include <cmath>

#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/kernel_checks.h"

namespace loom::LOOM_CUDA_NS {

namespace {

// x (B, H, T, D), rotate-half pairing (i, i + D/2); the angle is taken in f64 so that large
// positions keep their accuracy (as the CPU's table).
template <typename E>
__global__ void rope_kernel(const E* x, const int64_t* positions, int64_t rows, int64_t T,
                            int64_t D, double theta, RopeScaling scaling, bool inverse, E* out) {
  const int64_t half = D / 2;
  LOOM_GRID_STRIDE(k, rows * half) {
    const int64_t row = k / half, i = k % half, t = row % T;
    const double angle = double(positions[t]) * rope_frequency(theta, scaling, i, D);
    const float c = float(cos(angle)), s0 = float(sin(angle));
    const float s = inverse ? -s0 : s0;
    const E* xr = x + row * D;
    const float x1 = to_f32(xr[i]), x2 = to_f32(xr[i + half]);
    out[row * D + i] = from_f32<E>(x1 * c - x2 * s);
    out[row * D + i + half] = from_f32<E>(x2 * c + x1 * s);
  }
}

LOOM_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

template <typename E>
__global__ void swiglu_kernel(const E* gate, const E* up, int64_t n, E* out) {
  LOOM_GRID_STRIDE(i, n) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<E>(g * sigmoid(g) * to_f32(up[i]));
  }
}

template <typename E>
__global__ void swiglu_backward_kernel(const E* gate, const E* up, const E* gout, int64_t n,
                                       E* ggate, E* gup) {
  LOOM_GRID_STRIDE(i, n) {
    const float g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(gout[i]);
    const float s = sigmoid(g);
    gup[i] = from_f32<E>(d * g * s);
    ggate[i] = from_f32<E>(d * u * s * (1.0f + g * (1.0f - s)));
  }
}

}  // namespace

void CudaBackend::rope(const Tensor& x, const Tensor& positions, double theta,
                       const RopeScaling& scaling, bool inverse, const Tensor& out) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const int64_t rows = B * H * T;
  LOOM_CHECK(positions.device() == x.device() && positions.dtype() == DType::I64)
      << "rope: positions must be i64 on " << x.device().str();
  if (rows * (D / 2) == 0) return;
  dispatch_float(x.dtype(), "rope", [&](auto z) {
    using E = decltype(z);
    LOOM_LAUNCH(rope_kernel<E>, blocks_for(rows * (D / 2)), kBlock, ptr<const E>(x),
                ptr<const int64_t>(positions), rows, T, D, theta, scaling, inverse, ptr<E>(out));
  });
}

void CudaBackend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_float(gate.dtype(), "swiglu", [&](auto z) {
    using E = decltype(z);
    LOOM_LAUNCH(swiglu_kernel<E>, blocks_for(n), kBlock, ptr<const E>(gate), ptr<const E>(up), n,
                ptr<E>(out));
  });
}

void CudaBackend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gout,
                                  const Tensor& ggate, const Tensor& gup) {
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_float(gate.dtype(), "swiglu_backward", [&](auto z) {
    using E = decltype(z);
    LOOM_LAUNCH(swiglu_backward_kernel<E>, blocks_for(n), kBlock, ptr<const E>(gate),
                ptr<const E>(up), ptr<const E>(gout), n, ptr<E>(ggate), ptr<E>(gup));
  });
}

namespace {

struct AdamW {
  float b1, b2, c1, c2_sqrt, step_size, decay, eps, scale;
};

// The CPU's update, term for term.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamW h) {
  LOOM_GRID_STRIDE(i, n) {
    const float gi = h.scale * g[i];
    const float mi = h.b1 * m[i] + (1.0f - h.b1) * gi;
    const float vi = h.b2 * v[i] + (1.0f - h.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) * h.c2_sqrt + h.eps;
    p[i] = p[i] - h.decay * p[i] - h.step_size * (mi * h.c1) / denom;
  }
}

__global__ void axpby_kernel(float* y, const float* x, float a, float b, int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    y[i] = a * y[i] + b * x[i];
  }
}

}  // namespace

void CudaBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                             double eps, double weight_decay, int64_t step, double grad_scale) {
  check_f32_like("adamw", param, grad);
  check_f32_like("adamw", param, exp_avg);
  check_f32_like("adamw", param, exp_avg_sq);
  LOOM_CHECK(step >= 1) << "adamw: step count starts at 1, got " << step;
  const AdamW h{float(beta1),
                float(beta2),
                float(1.0 / (1.0 - std::pow(beta1, double(step)))),
                float(1.0 / std::sqrt(1.0 - std::pow(beta2, double(step)))),
                float(lr),
                float(lr * weight_decay),
                float(eps),
                float(grad_scale)};
  const int64_t n = param.numel();
  if (n == 0) return;
  LOOM_LAUNCH(adamw_kernel, blocks_for(n), kBlock, ptr<float>(param), ptr<const float>(grad),
              ptr<float>(exp_avg), ptr<float>(exp_avg_sq), n, h);
}

void CudaBackend::axpby(const Tensor& y, const Tensor& x, double a, double b) {
  check_f32_like("axpby", y, x);
  const int64_t n = y.numel();
  if (n == 0) return;
  LOOM_LAUNCH(axpby_kernel, blocks_for(n), kBlock, ptr<float>(y), ptr<const float>(x), float(a),
              float(b), n);
}

}  // namespace loom::LOOM_CUDA_NS
