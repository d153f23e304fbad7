#include "loom/ops/elementwise.h"

#include "loom/ops/detail.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"

namespace loom {

using detail::backend_of;

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LOOM_CHECK(da == db || da == 1 || db == 1)
        << "shapes " << a << " and " << b << " cannot be broadcast together";
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// A raw broadcast view of t with `shape` (stride 0 along broadcast dims).
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const size_t lead = shape.size() - size_t(t.dim());
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < size_t(t.dim()); ++i)
    strides[lead + i] = t.size(int64_t(i)) == shape[lead + i] ? t.stride(int64_t(i)) : 0;
  return t.as_strided(shape, strides, t.offset());
}

struct BinaryBackward : Node {
  BinaryOp op;
  Tensor a, b;  // saved only where the gradient needs them (mul, div)
  Shape a_shape, b_shape;
  const char* name() const override { return "BinaryBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    const bool need_a = inputs[0].active(), need_b = inputs[1].active();
    switch (op) {
      case BinaryOp::Add:
        if (need_a) ga = g;
        if (need_b) gb = g;
        break;
      case BinaryOp::Sub:
        if (need_a) ga = g;
        if (need_b) gb = neg(g);
        break;
      case BinaryOp::Mul:
        if (need_a) ga = mul(g, b);
        if (need_b) gb = mul(g, a);
        break;
      case BinaryOp::Div:
        if (need_a) ga = div(g, b);
        if (need_b) gb = neg(div(mul(g, a), mul(b, b)));
        break;
    }
    if (ga.defined()) ga = sum_to_shape(ga, a_shape);
    if (gb.defined()) gb = sum_to_shape(gb, b_shape);
    return {ga, gb};
  }
  void release() override {
    a = Tensor();
    b = Tensor();
  }
};

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
  }
  return "binary";
}

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  detail::check_floating(name, a, "a");
  detail::check_floating(name, b, "b");
  detail::check_same_dtype(name, a, b);
  detail::check_same_device(name, a, b);
  Shape shape;
  try {
    shape = broadcast_shapes(a.shape(), b.shape());
  } catch (const Error& e) {
    LOOM_FAIL() << name << ": shapes " << a.shape() << " and " << b.shape()
                << " cannot be broadcast together";
  }
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  backend_of(a).binary(op, broadcast_view(a, shape), broadcast_view(b, shape), out);
  if (any_requires_grad({a, b})) {
    auto node = std::make_shared<BinaryBackward>();
    node->op = op;
    if (op == BinaryOp::Mul || op == BinaryOp::Div) {
      node->a = a.detach();
      node->b = b.detach();
    }
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    record(node, {a, b}, {out});
  }
  return out;
}

struct UnaryBackward : Node {
  UnaryOp op;
  double alpha;
  Tensor x;
  const char* name() const override { return "UnaryBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    Tensor g = detail::raw_contiguous(grads[0]);
    Tensor gx = detail::empty_like(x);
    backend_of(x).unary_backward(op, alpha, x, g, gx);
    return {gx};
  }
  void release() override { x = Tensor(); }
};

}  // namespace

namespace detail {
Tensor unary_op(const char* name, UnaryOp op, double alpha, const Tensor& x) {
  check_floating(name, x, "input");
  Tensor out = empty_like(x);
  backend_of(x).unary(op, alpha, x, out);
  if (any_requires_grad({x})) {
    auto node = std::make_shared<UnaryBackward>();
    node->op = op;
    node->alpha = alpha;
    node->x = x.detach();
    record(node, {x}, {out});
  }
  return out;
}
}  // namespace detail

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Div, a, b);
}
Tensor neg(const Tensor& x) {
  return detail::unary_op("neg", UnaryOp::Neg, 0, x);
}
Tensor add_scalar(const Tensor& x, double v) {
  return detail::unary_op("add_scalar", UnaryOp::AddScalar, v, x);
}
Tensor mul_scalar(const Tensor& x, double v) {
  return detail::unary_op("mul_scalar", UnaryOp::MulScalar, v, x);
}
Tensor exp(const Tensor& x) {
  return detail::unary_op("exp", UnaryOp::Exp, 0, x);
}
Tensor log(const Tensor& x) {
  return detail::unary_op("log", UnaryOp::Log, 0, x);
}
Tensor sqrt(const Tensor& x) {
  return detail::unary_op("sqrt", UnaryOp::Sqrt, 0, x);
}
Tensor rsqrt(const Tensor& x) {
  return detail::unary_op("rsqrt", UnaryOp::Rsqrt, 0, x);
}
Tensor tanh(const Tensor& x) {
  return detail::unary_op("tanh", UnaryOp::Tanh, 0, x);
}
Tensor pow(const Tensor& x, double e) {
  return detail::unary_op("pow", UnaryOp::Pow, e, x);
}
Tensor relu(const Tensor& x) {
  return detail::unary_op("relu", UnaryOp::Relu, 0, x);
}

void add_(const Tensor& a, const Tensor& b) {
  LOOM_CHECK(!(grad_mode_enabled() && a.requires_grad()))
      << "add_: in-place update of a tensor that requires grad (use a NoGradGuard)";
  LOOM_CHECK(a.is_contiguous()) << "add_: destination " << a.shape() << " must be contiguous";
  detail::check_same_dtype("add_", a, b);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  LOOM_CHECK(shape == a.shape()) << "add_: " << b.shape() << " does not broadcast to " << a.shape();
  backend_of(a).binary(BinaryOp::Add, a, broadcast_view(b, shape), a);
}

}  // namespace loom
