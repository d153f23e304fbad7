// Elementwise arithmetic with broadcasting, and unary math (differentiable).
#pragma once
#include "loom/backend/backend.h"
#include "loom/core/tensor.h"

namespace loom {

Shape broadcast_shapes(const Shape& a, const Shape& b);  // numpy rules; throws if incompatible

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor add_scalar(const Tensor& x, double value);
Tensor mul_scalar(const Tensor& x, double value);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor relu(const Tensor& x);

inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator-(const Tensor& x) {
  return neg(x);
}
inline Tensor operator+(const Tensor& x, double s) {
  return add_scalar(x, s);
}
inline Tensor operator-(const Tensor& x, double s) {
  return add_scalar(x, -s);
}
inline Tensor operator*(const Tensor& x, double s) {
  return mul_scalar(x, s);
}
inline Tensor operator*(double s, const Tensor& x) {
  return mul_scalar(x, s);
}
inline Tensor operator/(const Tensor& x, double s) {
  return mul_scalar(x, 1.0 / s);
}

// In-place a += b on a tensor that does not require grad (accumulators, optimizer state).
void add_(const Tensor& a, const Tensor& b);

namespace detail {
// Applies a unary kernel and records its backward (shared with activation.cpp).
Tensor unary_op(const char* name, UnaryOp op, double alpha, const Tensor& x);
}  // namespace detail

}  // namespace loom
