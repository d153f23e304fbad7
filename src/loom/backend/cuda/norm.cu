// LayerNorm and RMSNorm over the last dim of (rows, C), and the adaLN pieces of a DiT block
// (modulation alone and fused with a LayerNorm without affine, the gated residual), forward
// and backward side by side. Statistics (mean, rstd) are f32 whatever the input dtype. One
// block per row; parameter and conditioning gradients are column sums (column_sums.h).
#include "loom/backend/cuda/column_sums.h"
#include "loom/backend/cuda/cuda_backend.h"

namespace loom::LOOM_CUDA_NS {

namespace {

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? ptr<const T>(t) : nullptr;
}

// Mean and 1 / sqrt(variance + eps) of a row, two passes (every thread gets both).
template <typename T>
__device__ inline void row_stats(const T* row, int64_t C, float eps, float& mean, float& rstd) {
  float s = 0.0f;
  LOOM_BLOCK_STRIDE(i, C) s += to_f32(row[i]);
  const float m = block_sum(s) / float(C);
  float v = 0.0f;
  LOOM_BLOCK_STRIDE(i, C) {
    const float d = to_f32(row[i]) - m;
    v += d * d;
  }
  mean = m;
  rstd = 1.0f / sqrtf(block_sum(v) / float(C) + eps);
}

// Rows of x grouped T to a sample: row r's conditioning row is r / T (T = rows for plain norms).
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, const T* shift,
                                  const T* scale, int64_t rows, int64_t C, int64_t T_per, float eps,
                                  T* y, float* mean, float* rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * C;
    float m, rs;
    row_stats(row, C, eps, m, rs);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    const int64_t n = r / T_per;
    LOOM_BLOCK_STRIDE(i, C) {
      float v = (to_f32(row[i]) - m) * rs;
      if (w) v *= to_f32(w[i]);
      if (b) v += to_f32(b[i]);
      if (scale) v = v * (1.0f + to_f32(scale[n * C + i])) + to_f32(shift[n * C + i]);
      y[r * C + i] = from_f32<T>(v);
    }
  }
}

// gx of a LayerNorm whose normalised value xhat got the gradient g = gy * w (or gy * (1 +
// scale) under modulation): (g - mean(g) - xhat mean(g xhat)) rstd.
template <typename T>
__global__ void layer_norm_backward_kernel(const T* x, const T* w, const T* scale,
                                           const float* mean, const float* rstd, const T* gy,
                                           int64_t rows, int64_t C, int64_t T_per, T* gx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;
    const T* gr = gy + r * C;
    const float m = mean[r], rs = rstd[r];
    const int64_t n = r / T_per;
    auto g_at = [&](int64_t i) {
      float g = to_f32(gr[i]);
      if (w) g *= to_f32(w[i]);
      if (scale) g *= 1.0f + to_f32(scale[n * C + i]);
      return g;
    };
    float sg = 0.0f, sgx = 0.0f;
    LOOM_BLOCK_STRIDE(i, C) {
      const float g = g_at(i), xh = (to_f32(xr[i]) - m) * rs;
      sg += g;
      sgx += g * xh;
    }
    const float a = block_sum(sg) / float(C), bb = block_sum(sgx) / float(C);
    LOOM_BLOCK_STRIDE(i, C) {
      const float xh = (to_f32(xr[i]) - m) * rs;
      gx[r * C + i] = from_f32<T>((g_at(i) - a - xh * bb) * rs);
    }
  }
}

// The term gy[r, c] * xhat[r, c] of a weight (or modulation-scale) gradient; rows grouped
// T_per to a sample (o), so r here counts within the group.
template <typename T>
struct GyXhat {
  const T* x;
  const T* gy;
  const float* mean;
  const float* rstd;
  int64_t T_per, C;
  bool rms;
  LOOM_HD float operator()(int64_t o, int64_t r, int64_t c) const {
    const int64_t row = o * T_per + r;
    const float xv = to_f32(x[row * C + c]);
    const float xh = rms ? xv * rstd[row] : (xv - mean[row]) * rstd[row];
    return to_f32(gy[row * C + c]) * xh;
  }
};

template <typename T>
__global__ void rms_norm_kernel(const T* x, const T* w, int64_t rows, int64_t C, float eps, T* y,
                                float* rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * C;
    float ss = 0.0f;
    LOOM_BLOCK_STRIDE(i, C) {
      const float v = to_f32(row[i]);
      ss += v * v;
    }
    const float rs = 1.0f / sqrtf(block_sum(ss) / float(C) + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    LOOM_BLOCK_STRIDE(i, C) {
      float v = to_f32(row[i]) * rs;
      if (w) v *= to_f32(w[i]);
      y[r * C + i] = from_f32<T>(v);
    }
  }
}

template <typename T>
__global__ void rms_norm_backward_kernel(const T* x, const T* w, const float* rstd, const T* gy,
                                         int64_t rows, int64_t C, T* gx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;
    const T* gr = gy + r * C;
    const float rs = rstd[r];
    float sgx = 0.0f;
    LOOM_BLOCK_STRIDE(i, C) {
      const float g = w ? to_f32(gr[i]) * to_f32(w[i]) : to_f32(gr[i]);
      sgx += g * to_f32(xr[i]) * rs;
    }
    const float bb = block_sum(sgx) / float(C);
    LOOM_BLOCK_STRIDE(i, C) {
      const float g = w ? to_f32(gr[i]) * to_f32(w[i]) : to_f32(gr[i]);
      gx[r * C + i] = from_f32<T>((g - to_f32(xr[i]) * rs * bb) * rs);
    }
  }
}

unsigned row_grid(int64_t rows) {
  return blocks_for(rows, 1);
}

}  // namespace

void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     float eps, const Tensor& y, const Tensor& mean,
                                     const Tensor& rstd) {
  const int64_t rows = x.size(0), C = x.size(1);
  if (rows == 0) return;
  dispatch_float(x.dtype(), "layer_norm", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(layer_norm_kernel<T>, row_grid(rows), kBlock, ptr<const T>(x),
                ptr_or_null<T>(weight), ptr_or_null<T>(bias), nullptr, nullptr, rows, C, rows, eps,
                ptr<T>(y), ptr<float>(mean), ptr<float>(rstd));
  });
}

void CudaBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                      const Tensor& gweight, const Tensor& gbias) {
  const int64_t rows = x.size(0), C = x.size(1);
  dispatch_float(x.dtype(), "layer_norm_backward", [&](auto z) {
    using T = decltype(z);
    if (rows > 0)
      LOOM_LAUNCH(layer_norm_backward_kernel<T>, row_grid(rows), kBlock, ptr<const T>(x),
                  ptr_or_null<T>(weight), nullptr, ptr<const float>(mean), ptr<const float>(rstd),
                  ptr<const T>(gy), rows, C, rows, ptr<T>(gx));
    if (gweight.defined())
      column_reduce(1, rows, C,
                    GyXhat<T>{ptr<const T>(x), ptr<const T>(gy), ptr<const float>(mean),
                              ptr<const float>(rstd), rows, C, false},
                    ptr<T>(gweight), x.device());
    if (gbias.defined())
      column_sums<T>(ptr<const T>(gy), 1, rows, C, C, 0, ptr<T>(gbias), x.device());
  });
}

void CudaBackend::rms_norm_forward(const Tensor& x, const Tensor& weight, float eps,
                                   const Tensor& y, const Tensor& rstd) {
  const int64_t rows = x.size(0), C = x.size(1);
  if (rows == 0) return;
  dispatch_float(x.dtype(), "rms_norm", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(rms_norm_kernel<T>, row_grid(rows), kBlock, ptr<const T>(x), ptr_or_null<T>(weight),
                rows, C, eps, ptr<T>(y), ptr<float>(rstd));
  });
}

void CudaBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                    const Tensor& gy, const Tensor& gx, const Tensor& gweight) {
  const int64_t rows = x.size(0), C = x.size(1);
  dispatch_float(x.dtype(), "rms_norm_backward", [&](auto z) {
    using T = decltype(z);
    if (rows > 0)
      LOOM_LAUNCH(rms_norm_backward_kernel<T>, row_grid(rows), kBlock, ptr<const T>(x),
                  ptr_or_null<T>(weight), ptr<const float>(rstd), ptr<const T>(gy), rows, C,
                  ptr<T>(gx));
    if (gweight.defined())
      column_reduce(1, rows, C,
                    GyXhat<T>{ptr<const T>(x), ptr<const T>(gy), nullptr, ptr<const float>(rstd),
                              rows, C, true},
                    ptr<T>(gweight), x.device());
  });
}

void CudaBackend::layer_norm_modulate_forward(const Tensor& x, const Tensor& shift,
                                              const Tensor& scale, float eps, const Tensor& y,
                                              const Tensor& mean, const Tensor& rstd) {
  const int64_t B = x.size(0), T_per = x.size(1), C = x.size(2), rows = B * T_per;
  if (rows == 0) return;
  dispatch_float(x.dtype(), "layer_norm_modulate", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(layer_norm_kernel<T>, row_grid(rows), kBlock, ptr<const T>(x), nullptr, nullptr,
                ptr<const T>(shift), ptr<const T>(scale), rows, C, T_per, eps, ptr<T>(y),
                ptr<float>(mean), ptr<float>(rstd));
  });
}

void CudaBackend::layer_norm_modulate_backward(const Tensor& x, const Tensor& scale,
                                               const Tensor& mean, const Tensor& rstd,
                                               const Tensor& gy, const Tensor& gx,
                                               const Tensor& gshift, const Tensor& gscale) {
  const int64_t B = x.size(0), T_per = x.size(1), C = x.size(2), rows = B * T_per;
  dispatch_float(x.dtype(), "layer_norm_modulate_backward", [&](auto z) {
    using T = decltype(z);
    if (rows > 0)
      LOOM_LAUNCH(layer_norm_backward_kernel<T>, row_grid(rows), kBlock, ptr<const T>(x), nullptr,
                  ptr<const T>(scale), ptr<const float>(mean), ptr<const float>(rstd),
                  ptr<const T>(gy), rows, C, T_per, ptr<T>(gx));
    column_sums<T>(ptr<const T>(gy), B, T_per, C, C, T_per * C, ptr<T>(gshift), x.device());
    column_reduce(B, T_per, C,
                  GyXhat<T>{ptr<const T>(x), ptr<const T>(gy), ptr<const float>(mean),
                            ptr<const float>(rstd), T_per, C, false},
                  ptr<T>(gscale), x.device());
  });
}

namespace {

// out = x * (1 + scale[n]) + shift[n] over (B, T, C), or the gated residual x + gate[n] * h.
template <typename T>
__global__ void modulate_kernel(const T* x, const T* shift, const T* scale, int64_t T_per,
                                int64_t C, int64_t n_all, T* out) {
  LOOM_GRID_STRIDE(i, n_all) {
    const int64_t n = i / (T_per * C), c = i % C;
    out[i] =
        from_f32<T>(to_f32(x[i]) * (1.0f + to_f32(scale[n * C + c])) + to_f32(shift[n * C + c]));
  }
}

template <typename T>
__global__ void modulate_backward_kernel(const T* scale, const T* gout, int64_t T_per, int64_t C,
                                         int64_t n_all, T* gx) {
  LOOM_GRID_STRIDE(i, n_all) {
    const int64_t n = i / (T_per * C), c = i % C;
    gx[i] = from_f32<T>(to_f32(gout[i]) * (1.0f + to_f32(scale[n * C + c])));
  }
}

template <typename T>
__global__ void gated_residual_kernel(const T* x, const T* gate, const T* h, int64_t T_per,
                                      int64_t C, int64_t n_all, T* out) {
  LOOM_GRID_STRIDE(i, n_all) {
    const int64_t n = i / (T_per * C), c = i % C;
    out[i] = from_f32<T>(to_f32(x[i]) + to_f32(gate[n * C + c]) * to_f32(h[i]));
  }
}

template <typename T>
__global__ void gated_residual_backward_kernel(const T* gate, const T* gout, int64_t T_per,
                                               int64_t C, int64_t n_all, T* gh) {
  LOOM_GRID_STRIDE(i, n_all) {
    const int64_t n = i / (T_per * C), c = i % C;
    gh[i] = from_f32<T>(to_f32(gout[i]) * to_f32(gate[n * C + c]));
  }
}

// The term a[row, c] * b[row, c] of a per-sample column sum (rows grouped T_per to a sample).
template <typename T>
struct Product {
  const T* a;
  const T* b;
  int64_t T_per, C;
  LOOM_HD float operator()(int64_t o, int64_t r, int64_t c) const {
    const int64_t i = (o * T_per + r) * C + c;
    return to_f32(a[i]) * to_f32(b[i]);
  }
};

}  // namespace

void CudaBackend::modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                   const Tensor& out) {
  const int64_t T_per = x.size(1), C = x.size(2), n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "modulate", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(modulate_kernel<T>, blocks_for(n), kBlock, ptr<const T>(x), ptr<const T>(shift),
                ptr<const T>(scale), T_per, C, n, ptr<T>(out));
  });
}

void CudaBackend::modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& gout,
                                    const Tensor& gx, const Tensor& gshift, const Tensor& gscale) {
  const int64_t B = x.size(0), T_per = x.size(1), C = x.size(2), n = x.numel();
  dispatch_float(x.dtype(), "modulate_backward", [&](auto z) {
    using T = decltype(z);
    if (n > 0)
      LOOM_LAUNCH(modulate_backward_kernel<T>, blocks_for(n), kBlock, ptr<const T>(scale),
                  ptr<const T>(gout), T_per, C, n, ptr<T>(gx));
    column_sums<T>(ptr<const T>(gout), B, T_per, C, C, T_per * C, ptr<T>(gshift), x.device());
    column_reduce(B, T_per, C, Product<T>{ptr<const T>(gout), ptr<const T>(x), T_per, C},
                  ptr<T>(gscale), x.device());
  });
}

void CudaBackend::gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& h,
                                         const Tensor& out) {
  const int64_t T_per = x.size(1), C = x.size(2), n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "gated_residual", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(gated_residual_kernel<T>, blocks_for(n), kBlock, ptr<const T>(x),
                ptr<const T>(gate), ptr<const T>(h), T_per, C, n, ptr<T>(out));
  });
}

void CudaBackend::gated_residual_backward(const Tensor& h, const Tensor& gate, const Tensor& gout,
                                          const Tensor& gh, const Tensor& ggate) {
  const int64_t B = h.size(0), T_per = h.size(1), C = h.size(2), n = h.numel();
  dispatch_float(h.dtype(), "gated_residual_backward", [&](auto z) {
    using T = decltype(z);
    if (n > 0)
      LOOM_LAUNCH(gated_residual_backward_kernel<T>, blocks_for(n), kBlock, ptr<const T>(gate),
                  ptr<const T>(gout), T_per, C, n, ptr<T>(gh));
    column_reduce(B, T_per, C, Product<T>{ptr<const T>(gout), ptr<const T>(h), T_per, C},
                  ptr<T>(ggate), h.device());
  });
}

}  // namespace loom::LOOM_CUDA_NS
