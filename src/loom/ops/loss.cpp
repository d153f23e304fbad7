#include "loom/ops/loss.h"

#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"

namespace loom {

using detail::backend_of;

namespace {

struct CrossEntropyBackward : Node {
  Tensor logits, targets, lse;
  int64_t ignore_index, count;
  Shape logits_shape;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const int64_t n = logits.size(0);  // logits kept as (n, V)
    // d loss / d loss_row = g / count for every row (ignored rows get zero in the kernel).
    Tensor per_row = contiguous(mul_scalar(expand(reshape(to_dtype(g[0], DType::F32), {1}), {n}),
                                           count > 0 ? 1.0 / double(count) : 0.0));
    Tensor glogits = detail::empty_like(logits);
    backend_of(logits).cross_entropy_backward(logits, targets, ignore_index, lse, per_row, glogits);
    return {glogits.as_strided(logits_shape, contiguous_strides(logits_shape), 0)};
  }
  void release() override { logits = targets = lse = Tensor(); }
};

struct MseBackward : Node {
  Tensor diff;  // pred - target
  const char* name() const override { return "MseBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const double scale = 2.0 / double(diff.numel());
    Tensor gd = mul(diff, expand(to_dtype(g[0], diff.dtype()), diff.shape()));
    gd = mul_scalar(gd, scale);
    return {inputs[0].active() ? gd : Tensor(), inputs[1].active() ? neg(gd) : Tensor()};
  }
  void release() override { diff = Tensor(); }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  detail::check_floating("cross_entropy", logits, "logits");
  detail::check_defined("cross_entropy", targets, "targets");
  LOOM_CHECK(targets.dtype() == DType::I64)
      << "cross_entropy: targets must be i64, got " << dtype_name(targets.dtype());
  LOOM_CHECK(logits.dim() >= 1 && logits.dim() == targets.dim() + 1)
      << "cross_entropy: logits " << logits.shape() << " and targets " << targets.shape()
      << " do not match (expected logits = targets shape + (V))";
  for (int64_t d = 0; d < targets.dim(); ++d)
    LOOM_CHECK(logits.size(d) == targets.size(d))
        << "cross_entropy: logits " << logits.shape() << " and targets " << targets.shape()
        << " differ in dim " << d;
  const int64_t V = logits.size(-1), N = targets.numel();  // N rows of V logits
  Tensor lc = detail::raw_contiguous(logits);
  Tensor l2 = lc.as_strided({N, V}, {V, 1}, lc.offset());
  Tensor tc = detail::raw_contiguous(targets);
  Tensor t1 = tc.as_strided({N}, {1}, tc.offset());
  Tensor losses = Tensor::empty({N}, DType::F32, logits.device());  // per row
  Tensor lse = Tensor::empty({N}, DType::F32, logits.device());     // per-row log-sum-exp
  backend_of(logits).cross_entropy_forward(l2, t1, ignore_index, losses, lse);
  int64_t count = 0;
  for (int64_t t : to_vector_i64(t1)) count += t != ignore_index;
  Tensor total;
  {
    NoGradGuard raw;
    total = mul_scalar(sum(losses), count > 0 ? 1.0 / double(count) : 0.0);  // scalar ()
  }
  if (any_requires_grad({logits})) {
    auto node = std::make_shared<CrossEntropyBackward>();
    node->logits = l2.detach();
    node->targets = t1;
    node->lse = lse;
    node->ignore_index = ignore_index;
    node->count = count;
    node->logits_shape = logits.shape();
    record(node, {logits}, {total});
  }
  return total;
}

Tensor mse(const Tensor& pred, const Tensor& target) {
  detail::check_floating("mse", pred, "pred");
  detail::check_floating("mse", target, "target");
  LOOM_CHECK(pred.shape() == target.shape())
      << "mse: pred " << pred.shape() << " and target " << target.shape() << " differ";
  detail::check_same_dtype("mse", pred, target);
  Tensor diff, total;
  {
    NoGradGuard raw;
    diff = sub(pred, target);
    Tensor d32 = to_dtype(diff, DType::F32);
    total = mul_scalar(sum(mul(d32, d32)), 1.0 / double(pred.numel()));  // scalar ()
  }
  if (any_requires_grad({pred, target})) {
    auto node = std::make_shared<MseBackward>();
    node->diff = diff;
    record(node, {pred, target}, {total});
  }
  return total;
}

}  // namespace loom
