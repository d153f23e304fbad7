// Elementwise kernels: unary math, its derivative, and broadcasting binary arithmetic.
// Loads widen to f32 and stores round back, so one template serves f32, bf16 and f16.
#include <cmath>

#include "loom/backend/cpu/column_sums.h"
#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/strided.h"
#include "loom/backend/cpu/vec_math.h"
#include "loom/backend/kernel_checks.h"

namespace loom {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// out = f(x) over a strided x and contiguous (or strided) out.
template <typename T, typename F>
void map1(const Tensor& x, const Tensor& out, int64_t cost, F f) {
  auto L = cpu::coalesce<2>(out.shape(), {&x.strides(), &out.strides()});
  const T* xs = static_cast<const T*>(x.data_ptr());
  T* os = static_cast<T*>(out.data_ptr());
  // flatten: the element function must be inlined into these loops, or they cannot be
  // vectorised (GCC otherwise calls it once per element when it is used in several loops).
  cpu::for_each_row(
      L, cost, [&](auto off, int64_t n, auto st) __attribute__((flatten)) {
        const T* xp = xs + off[0];
        T* op = os + off[1];
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < n; ++i) op[i] = from_f32<T>(f(to_f32(xp[i])));
        } else {
          for (int64_t i = 0; i < n; ++i) op[i * st[1]] = from_f32<T>(f(to_f32(xp[i * st[0]])));
        }
      });
}

// out = f(a, b) over strided a, b and out.
template <typename T, typename F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, int64_t cost, F f) {
  auto L = cpu::coalesce<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()});
  const T* as = static_cast<const T*>(a.data_ptr());
  const T* bs = static_cast<const T*>(b.data_ptr());
  T* os = static_cast<T*>(out.data_ptr());
  // flatten: the element function must be inlined into these loops, or they cannot be
  // vectorised (GCC otherwise calls it once per element when it is used in several loops).
  cpu::for_each_row(
      L, cost, [&](auto off, int64_t n, auto st) __attribute__((flatten)) {
        const T* ap = as + off[0];
        const T* bp = bs + off[1];
        T* op = os + off[2];
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
          for (int64_t i = 0; i < n; ++i) op[i] = from_f32<T>(f(to_f32(ap[i]), to_f32(bp[i])));
        } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
          const float bv = to_f32(bp[0]);
          for (int64_t i = 0; i < n; ++i) op[i] = from_f32<T>(f(to_f32(ap[i]), bv));
        } else {
          for (int64_t i = 0; i < n; ++i)
            op[i * st[2]] = from_f32<T>(f(to_f32(ap[i * st[0]]), to_f32(bp[i * st[1]])));
        }
      });
}

// GELU, tanh approximation, through 0.5 (1 + tanh(u)) = sigmoid(2u): one exp and one
// division per element and no branch (fast_tanh needs a second path near 0).
[[gnu::always_inline]] inline float gelu_sigmoid(float x) {  // sigmoid(2u), u = k (x + c x^3)
  return 1.0f / (1.0f + cpu::fast_exp(-2.0f * kSqrt2OverPi * x * (1.0f + kGeluCoeff * x * x)));
}
[[gnu::always_inline]] inline float gelu_tanh(float x) {
  return x * gelu_sigmoid(x);
}
[[gnu::always_inline]] inline float gelu_tanh_grad(float x) {
  const float s = gelu_sigmoid(x);
  return s + x * s * (1.0f - s) * (2.0f * kSqrt2OverPi) * (1.0f + 3.0f * kGeluCoeff * x * x);
}
[[gnu::always_inline]] inline float silu_grad(float x) {
  const float s = cpu::fast_sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

}  // namespace

void CpuBackend::unary(UnaryOp op, double alpha_d, const Tensor& x, const Tensor& out) {
  check_same_layout("unary", x, out);
  const float alpha = float(alpha_d);
  cpu::dispatch_float(x.dtype(), "unary", [&](auto z) {
    using T = decltype(z);
    switch (op) {
      case UnaryOp::Neg:
        map1<T>(x, out, 1, [](float v) { return -v; });
        break;
      case UnaryOp::Exp:
        map1<T>(x, out, 10, [](float v) { return cpu::fast_exp(v); });
        break;
      case UnaryOp::Log:
        map1<T>(x, out, 20, [](float v) { return std::log(v); });
        break;
      case UnaryOp::Sqrt:
        map1<T>(x, out, 10, [](float v) { return std::sqrt(v); });
        break;
      case UnaryOp::Rsqrt:
        map1<T>(x, out, 10, [](float v) { return 1.0f / std::sqrt(v); });
        break;
      case UnaryOp::Tanh:
        map1<T>(x, out, 15, [](float v) { return cpu::fast_tanh(v); });
        break;
      case UnaryOp::Gelu:
        map1<T>(x, out, 20, [](float v) { return gelu_tanh(v); });
        break;
      case UnaryOp::Silu:
        map1<T>(x, out, 15, [](float v) { return v * cpu::fast_sigmoid(v); });
        break;
      case UnaryOp::Pow:
        map1<T>(x, out, 30, [=](float v) { return std::pow(v, alpha); });
        break;
      case UnaryOp::AddScalar:
        map1<T>(x, out, 1, [=](float v) { return v + alpha; });
        break;
      case UnaryOp::MulScalar:
        map1<T>(x, out, 1, [=](float v) { return v * alpha; });
        break;
      case UnaryOp::Relu:
        map1<T>(x, out, 1, [](float v) { return v > 0.0f ? v : 0.0f; });
        break;
    }
  });
}

void CpuBackend::unary_backward(UnaryOp op, double alpha_d, const Tensor& x, const Tensor& gout,
                                const Tensor& gx) {
  check_same_layout("unary_backward", x, gx);
  check_same_layout("unary_backward", gout, gx);
  const float alpha = float(alpha_d);
  cpu::dispatch_float(x.dtype(), "unary_backward", [&](auto z) {
    using T = decltype(z);
    auto run = [&](int64_t cost, auto dfdx) {
      map2<T>(x, gout, gx, cost, [=](float v, float g) { return g * dfdx(v); });
    };
    switch (op) {
      case UnaryOp::Neg:
        run(1, [](float) { return -1.0f; });
        break;
      case UnaryOp::Exp:
        run(10, [](float v) { return cpu::fast_exp(v); });
        break;
      case UnaryOp::Log:
        run(2, [](float v) { return 1.0f / v; });
        break;
      case UnaryOp::Sqrt:
        run(10, [](float v) { return 0.5f / std::sqrt(v); });
        break;
      case UnaryOp::Rsqrt:
        run(10, [](float v) { return -0.5f / (v * std::sqrt(v)); });
        break;
      case UnaryOp::Tanh:
        run(15, [](float v) {
          const float t = cpu::fast_tanh(v);
          return 1.0f - t * t;
        });
        break;
      case UnaryOp::Gelu:
        run(25, [](float v) { return gelu_tanh_grad(v); });
        break;
      case UnaryOp::Silu:
        run(15, [](float v) { return silu_grad(v); });
        break;
      case UnaryOp::Pow:
        run(30, [=](float v) { return alpha * std::pow(v, alpha - 1.0f); });
        break;
      case UnaryOp::AddScalar:
        run(1, [](float) { return 1.0f; });
        break;
      case UnaryOp::MulScalar:
        run(1, [=](float) { return alpha; });
        break;
      case UnaryOp::Relu:
        run(1, [](float v) { return v > 0.0f ? 1.0f : 0.0f; });
        break;
    }
  });
}

void CpuBackend::gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                                    const Tensor& gbias) {
  check_gelu_bias_backward(pre, gout, gpre, gbias);
  const int64_t rows = pre.size(0), n = pre.size(1);
  const int64_t sx = pre.stride(0), sg = gout.stride(0);
  cpu::dispatch_float(pre.dtype(), "gelu_bias_backward", [&](auto z) {
    using T = decltype(z);
    const T* xs = static_cast<const T*>(pre.data_ptr());
    const T* gs = static_cast<const T*>(gout.data_ptr());
    T* bias = gbias.defined() ? static_cast<T*>(gbias.data_ptr()) : nullptr;
    auto value = [&](int64_t r, int64_t c) {
      return to_f32(gs[r * sg + c]) * gelu_tanh_grad(to_f32(xs[r * sx + c]));
    };
    if (gpre.dtype() == pre.dtype()) {  // the bias sums gpre as stored
      auto as_stored = [](float v) { return double(to_f32(from_f32<T>(v))); };
      cpu::store_with_column_sums(rows, n, 25, value, static_cast<T*>(gpre.data_ptr()),
                                  gpre.stride(0), as_stored, bias);
    } else {  // bf16 gpre from f32 operands: the bias sums the f32 values before rounding
      auto unrounded = [](float v) { return double(v); };
      cpu::store_with_column_sums(rows, n, 25, value, static_cast<bf16*>(gpre.data_ptr()),
                                  gpre.stride(0), unrounded, bias);
    }
  });
}

void CpuBackend::cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) {
  check_cast_with_column_sums(x, out, sums);
  const int64_t sx = x.stride(0);
  auto unrounded = [](float v) { return double(v); };
  if (!out.defined()) {  // already the bf16 operand: its sums alone, in the same order
    const bf16* xs = x.data<bf16>();
    auto value = [&](int64_t r, int64_t c) { return to_f32(xs[r * sx + c]); };
    cpu::store_with_column_sums(x.size(0), x.size(1), 1, value, nullptr, 0, unrounded,
                                sums.data<float>());
    return;
  }
  const float* xs = x.data<float>();
  auto value = [&](int64_t r, int64_t c) { return xs[r * sx + c]; };
  cpu::store_with_column_sums(x.size(0), x.size(1), 2, value, static_cast<bf16*>(out.data_ptr()),
                              out.stride(0), unrounded, sums.data<float>());
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_layout("binary", a, out);
  check_same_layout("binary", b, out);
  cpu::dispatch_float(a.dtype(), "binary", [&](auto z) {
    using T = decltype(z);
    switch (op) {
      case BinaryOp::Add:
        map2<T>(a, b, out, 1, [](float x, float y) { return x + y; });
        break;
      case BinaryOp::Sub:
        map2<T>(a, b, out, 1, [](float x, float y) { return x - y; });
        break;
      case BinaryOp::Mul:
        map2<T>(a, b, out, 1, [](float x, float y) { return x * y; });
        break;
      case BinaryOp::Div:
        map2<T>(a, b, out, 2, [](float x, float y) { return x / y; });
        break;
    }
  });
}

}  // namespace loom
