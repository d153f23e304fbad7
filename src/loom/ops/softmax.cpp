#include "loom/ops/softmax.h"

#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {

struct SoftmaxBackward : Node {
  Tensor y;  // the output: both backward formulas need only it
  bool log;
  const char* name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gy = detail::raw_contiguous(g[0]);
    const int64_t n = y.size(-1);  // over the last dim: rows of n
    Tensor gx = detail::empty_like(y);
    auto rows = [&](const Tensor& t) {
      return t.as_strided({t.numel() / n, n}, {n, 1}, t.offset());
    };
    backend_of(y).softmax_backward(rows(y), rows(gy), log, rows(gx));
    return {gx};
  }
  void release() override { y = Tensor(); }
};

Tensor softmax_impl(const Tensor& x, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_floating(op, x, "input");
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) > 0) << op << ": bad input shape " << x.shape();
  Tensor c = detail::raw_contiguous(x);
  const int64_t n = x.size(-1);  // x seen as (x.numel() / n, n)
  Tensor y = detail::empty_like(c);
  backend_of(x).softmax_forward(c.as_strided({x.numel() / n, n}, {n, 1}, c.offset()), log,
                                y.as_strided({x.numel() / n, n}, {n, 1}, 0));
  if (any_requires_grad({x})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->y = y.detach();
    node->log = log;
    record(node, {x}, {y});
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return softmax_impl(x, false);
}
Tensor log_softmax(const Tensor& x) {
  return softmax_impl(x, true);
}

}  // namespace loom
