#include "loom/ops/activation.h"

#include "loom/ops/detail.h"
#include "loom/ops/elementwise.h"

namespace loom {

using detail::backend_of;

Tensor gelu(const Tensor& x) {
  return detail::unary_op("gelu", UnaryOp::Gelu, 0, x);
}
Tensor silu(const Tensor& x) {
  return detail::unary_op("silu", UnaryOp::Silu, 0, x);
}

Tensor sigmoid(const Tensor& x) {
  // The tanh form is one kernel and never overflows (exp(-x) does for large negative x).
  return add_scalar(mul_scalar(tanh(mul_scalar(x, 0.5)), 0.5), 0.5);
}

namespace {
struct SoftplusBackward : Node {
  Tensor x;
  const char* name() const override { return "SoftplusBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {mul(g[0], sigmoid(x))};
  }
  void release() override { x = Tensor(); }
};
}  // namespace

Tensor softplus(const Tensor& x) {
  detail::check_floating("softplus", x, "x");
  Tensor out;
  {
    // exp(x) overflows f32 from x = 89 on; exp(-|x|) is at most 1.
    NoGradGuard composite;
    out = add(relu(x), log(add_scalar(exp(neg(add(relu(x), relu(neg(x))))), 1.0)));
  }
  if (any_requires_grad({x})) {  // d/dx = sigmoid(x), also at 0 (where relu's kink would give 0)
    auto node = std::make_shared<SoftplusBackward>();
    node->x = x.detach();
    record(node, {x}, {out});
  }
  return out;
}

namespace {
struct SwigluBackward : Node {
  Tensor gate, up;
  const char* name() const override { return "SwigluBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor ggate = detail::empty_like(gate), gup = detail::empty_like(up);
    backend_of(gate).swiglu_backward(gate, up, detail::raw_contiguous(g[0]), ggate, gup);
    return {ggate, gup};
  }
  void release() override { gate = up = Tensor(); }
};
}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  detail::check_floating("swiglu", gate, "gate");
  detail::check_floating("swiglu", up, "up");
  detail::check_same_dtype("swiglu", gate, up);
  LOOM_CHECK(gate.shape() == up.shape())
      << "swiglu: gate " << gate.shape() << " and up " << up.shape() << " differ";
  Tensor g = detail::raw_contiguous(gate), u = detail::raw_contiguous(up);
  Tensor out = detail::empty_like(g);
  backend_of(g).swiglu_forward(g, u, out);
  if (any_requires_grad({gate, up})) {
    auto node = std::make_shared<SwigluBackward>();
    node->gate = g.detach();
    node->up = u.detach();
    record(node, {gate, up}, {out});
  }
  return out;
}

}  // namespace loom
