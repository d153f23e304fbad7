#include "loom/ops/norm.h"

#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {

// x as a contiguous (rows, C) tensor.
Tensor rows_of(const Tensor& x) {
  Tensor c = detail::raw_contiguous(x);
  const int64_t C = x.size(-1);
  return c.as_strided({x.numel() / C, C}, {C, 1}, c.offset());
}

void check_affine(const char* op, const Tensor& x, const Tensor& p, const char* what) {
  if (!p.defined()) return;
  detail::check_shape(op, p, {x.size(-1)}, what);
  detail::check_same_dtype(op, x, p);
}

struct LayerNormBackward : Node {
  Tensor x, weight, mean, rstd;  // x as (rows, C)
  Shape x_shape;
  bool has_bias;
  const char* name() const override { return "LayerNormBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = detail::empty_like(x);  // (rows, C)
    Tensor gw = weight.defined() && inputs[1].active() ? detail::empty_like(weight) : Tensor();
    Tensor gb = has_bias && inputs[2].active() ? Tensor::empty({x.size(-1)}, x.dtype(), x.device())
                                               : Tensor();
    backend_of(x).layer_norm_backward(x, weight, mean, rstd, rows_of(g[0]), gx, gw, gb);
    return {gx.as_strided(x_shape, contiguous_strides(x_shape), 0), gw, gb};
  }
  void release() override { x = weight = mean = rstd = Tensor(); }
};

struct RmsNormBackward : Node {
  Tensor x, weight, rstd;  // x as (rows, C)
  Shape x_shape;
  const char* name() const override { return "RmsNormBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = detail::empty_like(x);
    Tensor gw = weight.defined() && inputs[1].active() ? detail::empty_like(weight) : Tensor();
    backend_of(x).rms_norm_backward(x, weight, rstd, rows_of(g[0]), gx, gw);
    return {gx.as_strided(x_shape, contiguous_strides(x_shape), 0), gw};
  }
  void release() override { x = weight = rstd = Tensor(); }
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  detail::check_floating("layer_norm", x, "input");
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) > 0) << "layer_norm: bad input shape " << x.shape();
  check_affine("layer_norm", x, weight, "weight");
  check_affine("layer_norm", x, bias, "bias");
  Tensor x2 = rows_of(x);  // (rows, C), rows = x.numel() / C
  const int64_t rows = x2.size(0);
  const Tensor w = weight.defined() ? detail::raw_contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? detail::raw_contiguous(bias) : Tensor();
  Tensor y = detail::empty_like(x2);
  // Per-row statistics (rows) in f32, kept for the backward.
  Tensor mean = Tensor::empty({rows}, DType::F32, x.device());
  Tensor rstd = Tensor::empty({rows}, DType::F32, x.device());
  backend_of(x).layer_norm_forward(x2, w, b, eps, y, mean, rstd);
  Tensor out = y.as_strided(x.shape(), contiguous_strides(x.shape()), 0);  // (..., C) like x
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->x = x2.detach();
    node->weight = w.defined() ? w.detach() : Tensor();
    node->x_shape = x.shape();
    node->mean = mean;
    node->rstd = rstd;
    node->has_bias = bias.defined();
    record(node, {x, weight, bias}, {out});
  }
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  detail::check_floating("rms_norm", x, "input");
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) > 0) << "rms_norm: bad input shape " << x.shape();
  check_affine("rms_norm", x, weight, "weight");
  Tensor x2 = rows_of(x);  // (rows, C)
  const Tensor w = weight.defined() ? detail::raw_contiguous(weight) : Tensor();
  Tensor y = detail::empty_like(x2);
  Tensor rstd = Tensor::empty({x2.size(0)}, DType::F32, x.device());  // (rows)
  backend_of(x).rms_norm_forward(x2, w, eps, y, rstd);
  Tensor out = y.as_strided(x.shape(), contiguous_strides(x.shape()), 0);
  if (any_requires_grad({x, weight})) {
    auto node = std::make_shared<RmsNormBackward>();
    node->x = x2.detach();
    node->weight = w.defined() ? w.detach() : Tensor();
    node->x_shape = x.shape();
    node->rstd = rstd;
    record(node, {x, weight}, {out});
  }
  return out;
}

}  // namespace loom
