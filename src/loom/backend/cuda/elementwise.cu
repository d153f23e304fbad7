// Elementwise kernels: unary math, its derivative, broadcasting binary arithmetic, and the
// GELU backward fused with the bias gradient. Loads widen to f32 and stores round back.
#include "loom/backend/cuda/column_sums.h"
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/kernel_checks.h"

namespace loom::LOOM_CUDA_NS {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

LOOM_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
// GELU, tanh approximation: 0.5 (1 + tanh(u)) = sigmoid(2u), u = k (x + c x^3).
LOOM_HD inline float gelu_sigmoid(float x) {
  return sigmoid(2.0f * kSqrt2OverPi * x * (1.0f + kGeluCoeff * x * x));
}
LOOM_HD inline float gelu_grad(float x) {
  const float s = gelu_sigmoid(x);
  return s + x * s * (1.0f - s) * (2.0f * kSqrt2OverPi) * (1.0f + 3.0f * kGeluCoeff * x * x);
}

LOOM_HD inline float unary_value(UnaryOp op, float alpha, float v) {
  switch (op) {
    case UnaryOp::Neg:
      return -v;
    case UnaryOp::Exp:
      return expf(v);
    case UnaryOp::Log:
      return logf(v);
    case UnaryOp::Sqrt:
      return sqrtf(v);
    case UnaryOp::Rsqrt:
      return 1.0f / sqrtf(v);
    case UnaryOp::Tanh:
      return tanhf(v);
    case UnaryOp::Gelu:
      return v * gelu_sigmoid(v);
    case UnaryOp::Silu:
      return v * sigmoid(v);
    case UnaryOp::Pow:
      return powf(v, alpha);
    case UnaryOp::AddScalar:
      return v + alpha;
    case UnaryOp::MulScalar:
      return v * alpha;
    case UnaryOp::Relu:
      return v > 0.0f ? v : 0.0f;
  }
  return 0.0f;
}

// d op(v) / dv
LOOM_HD inline float unary_derivative(UnaryOp op, float alpha, float v) {
  switch (op) {
    case UnaryOp::Neg:
      return -1.0f;
    case UnaryOp::Exp:
      return expf(v);
    case UnaryOp::Log:
      return 1.0f / v;
    case UnaryOp::Sqrt:
      return 0.5f / sqrtf(v);
    case UnaryOp::Rsqrt:
      return -0.5f / (v * sqrtf(v));
    case UnaryOp::Tanh: {
      const float t = tanhf(v);
      return 1.0f - t * t;
    }
    case UnaryOp::Gelu:
      return gelu_grad(v);
    case UnaryOp::Silu: {
      const float s = sigmoid(v);
      return s * (1.0f + v * (1.0f - s));
    }
    case UnaryOp::Pow:
      return alpha * powf(v, alpha - 1.0f);
    case UnaryOp::AddScalar:
      return 1.0f;
    case UnaryOp::MulScalar:
      return alpha;
    case UnaryOp::Relu:
      return v > 0.0f ? 1.0f : 0.0f;
  }
  return 0.0f;
}

LOOM_HD inline float binary_value(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
  }
  return 0.0f;
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, float alpha, const T* x, T* out, StridedIndex<2> L,
                             int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t at[2];
    L.offsets(i, at);
    out[at[1]] = from_f32<T>(unary_value(op, alpha, to_f32(x[at[0]])));
  }
}

template <typename T>
__global__ void unary_backward_kernel(UnaryOp op, float alpha, const T* x, const T* g, T* gx,
                                      StridedIndex<3> L, int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t at[3];
    L.offsets(i, at);
    gx[at[2]] = from_f32<T>(to_f32(g[at[1]]) * unary_derivative(op, alpha, to_f32(x[at[0]])));
  }
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, StridedIndex<3> L,
                              int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t at[3];
    L.offsets(i, at);
    out[at[2]] = from_f32<T>(binary_value(op, to_f32(a[at[0]]), to_f32(b[at[1]])));
  }
}

}  // namespace

void CudaBackend::unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) {
  check_same_layout("unary", x, out);
  const int64_t n = out.numel();
  if (n == 0) return;
  const StridedIndex<2> L = strided_index<2>(out.shape(), {&x.strides(), &out.strides()});
  dispatch_float(x.dtype(), "unary", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(unary_kernel<T>, blocks_for(n), kBlock, op, float(alpha), ptr<const T>(x),
                ptr<T>(out), L, n);
  });
}

void CudaBackend::unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& gout,
                                 const Tensor& gx) {
  check_same_layout("unary_backward", x, gx);
  check_same_layout("unary_backward", gout, gx);
  const int64_t n = gx.numel();
  if (n == 0) return;
  const StridedIndex<3> L =
      strided_index<3>(gx.shape(), {&x.strides(), &gout.strides(), &gx.strides()});
  dispatch_float(x.dtype(), "unary_backward", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(unary_backward_kernel<T>, blocks_for(n), kBlock, op, float(alpha), ptr<const T>(x),
                ptr<const T>(gout), ptr<T>(gx), L, n);
  });
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_layout("binary", a, out);
  check_same_layout("binary", b, out);
  const int64_t n = out.numel();
  if (n == 0) return;
  const StridedIndex<3> L =
      strided_index<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()});
  dispatch_float(a.dtype(), "binary", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(binary_kernel<T>, blocks_for(n), kBlock, op, ptr<const T>(a), ptr<const T>(b),
                ptr<T>(out), L, n);
  });
}

namespace {

// gout * gelu'(pre) at row r, column c (the column_reduce functor of the bias gradient).
template <typename T>
struct GeluGrad {
  const T* pre;
  int64_t sx;
  const T* gout;
  int64_t sg;
  LOOM_HD float operator()(int64_t, int64_t r, int64_t c) const {
    return to_f32(gout[r * sg + c]) * gelu_grad(to_f32(pre[r * sx + c]));
  }
};

// gpre = gout * gelu'(pre) over (rows, n) with row strides, stored as O.
template <typename T, typename O>
__global__ void gelu_backward_kernel(GeluGrad<T> value, O* gpre, int64_t so, int64_t rows,
                                     int64_t n) {
  LOOM_GRID_STRIDE(i, rows * n) {
    const int64_t r = i / n, c = i % n;
    gpre[r * so + c] = from_f32<O>(value(0, r, c));
  }
}

}  // namespace

void CudaBackend::gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                                     const Tensor& gbias) {
  check_gelu_bias_backward(pre, gout, gpre, gbias);
  const int64_t rows = pre.size(0), n = pre.size(1);
  if (rows * n == 0) return;
  dispatch_float(pre.dtype(), "gelu_bias_backward", [&](auto z) {
    using T = decltype(z);
    const GeluGrad<T> value{ptr<const T>(pre), pre.stride(0), ptr<const T>(gout), gout.stride(0)};
    if (gpre.dtype() == pre.dtype()) {
      constexpr auto same = gelu_backward_kernel<T, T>;
      LOOM_LAUNCH(same, blocks_for(rows * n), kBlock, value, ptr<T>(gpre), gpre.stride(0), rows, n);
      if (gbias.defined())  // the sum of gpre as stored
        column_sums<T>(ptr<const T>(gpre), 1, rows, n, gpre.stride(0), 0, ptr<T>(gbias),
                       gpre.device());
      return;
    }
    // bf16 gpre from f32: the bias sums the f32 values, recomputed, not their rounding.
    constexpr auto rounded = gelu_backward_kernel<T, bf16>;
    LOOM_LAUNCH(rounded, blocks_for(rows * n), kBlock, value, ptr<bf16>(gpre), gpre.stride(0), rows,
                n);
    if (gbias.defined()) column_reduce(1, rows, n, value, ptr<T>(gbias), gpre.device());
  });
}

void CudaBackend::cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) {
  check_cast_with_column_sums(x, out, sums);
  if (!out.defined()) {  // already the bf16 operand: its sums alone
    column_reduce(1, x.size(0), x.size(1), StridedValue<bf16>{ptr<const bf16>(x), x.stride(0), 0},
                  ptr<float>(sums), x.device());
    return;
  }
  copy(x, out);  // the device's rounding, as every cast
  column_sums<float>(ptr<const float>(x), 1, x.size(0), x.size(1), x.stride(0), 0, ptr<float>(sums),
                     x.device());
}

}  // namespace loom::LOOM_CUDA_NS
