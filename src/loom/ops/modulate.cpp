#include "loom/ops/modulate.h"

#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {
struct ModulateBackward : Node {
  Tensor x, scale;
  const char* name() const override { return "ModulateBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = detail::empty_like(x), gshift = detail::empty_like(scale),  // (B, T, C), (B, C)
        gscale = detail::empty_like(scale);                                 // (B, C)
    backend_of(x).modulate_backward(x, scale, detail::raw_contiguous(g[0]), gx, gshift, gscale);
    return {gx, gshift, gscale};
  }
  void release() override { x = scale = Tensor(); }
};

struct LayerNormModulateBackward : Node {
  Tensor x, scale, mean, rstd;
  const char* name() const override { return "LayerNormModulateBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = detail::empty_like(x), gshift = detail::empty_like(scale),
           gscale = detail::empty_like(scale);
    backend_of(x).layer_norm_modulate_backward(x, scale, mean, rstd, detail::raw_contiguous(g[0]),
                                               gx, gshift, gscale);
    return {gx, gshift, gscale};
  }
  void release() override { x = scale = mean = rstd = Tensor(); }
};

struct GatedResidualBackward : Node {
  Tensor gate, h;
  const char* name() const override { return "GatedResidualBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gh, ggate;
    if (inputs[1].active() || inputs[2].active()) {
      gh = detail::empty_like(h);        // (B, T, C)
      ggate = detail::empty_like(gate);  // (B, C)
      backend_of(h).gated_residual_backward(h, gate, detail::raw_contiguous(g[0]), gh, ggate);
    }
    return {g[0], ggate, gh};  // x's gradient is the incoming one itself
  }
  void release() override { gate = h = Tensor(); }
};

void check_modulate_args(const char* op, const Tensor& x, const Tensor& shift,
                         const Tensor& scale) {
  detail::check_floating(op, x, "x");
  detail::check_floating(op, shift, "shift");
  detail::check_floating(op, scale, "scale");
  LOOM_CHECK(x.dim() == 3) << op << ": x must be (B, T, C), got " << x.shape();
  detail::check_shape(op, shift, {x.size(0), x.size(2)}, "shift");
  detail::check_shape(op, scale, {x.size(0), x.size(2)}, "scale");
  detail::check_same_dtype(op, x, shift);
  detail::check_same_dtype(op, x, scale);
}
}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  check_modulate_args("modulate", x, shift, scale);
  Tensor xc = detail::raw_contiguous(x), sh = detail::raw_contiguous(shift),
         sc = detail::raw_contiguous(scale);
  Tensor out = detail::empty_like(xc);  // (B, T, C)
  backend_of(x).modulate_forward(xc, sh, sc, out);
  if (any_requires_grad({x, shift, scale})) {
    auto node = std::make_shared<ModulateBackward>();
    node->x = xc.detach();
    node->scale = sc.detach();
    record(node, {x, shift, scale}, {out});
  }
  return out;
}

Tensor layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps) {
  check_modulate_args("layer_norm_modulate", x, shift, scale);
  Tensor xc = detail::raw_contiguous(x), sh = detail::raw_contiguous(shift),
         sc = detail::raw_contiguous(scale);
  Tensor out = detail::empty_like(xc);
  const int64_t rows = x.size(0) * x.size(1);  // B T rows of C
  Tensor mean = Tensor::empty({rows}, DType::F32, x.device());
  Tensor rstd = Tensor::empty({rows}, DType::F32, x.device());
  backend_of(x).layer_norm_modulate_forward(xc, sh, sc, eps, out, mean, rstd);
  if (any_requires_grad({x, shift, scale})) {
    auto node = std::make_shared<LayerNormModulateBackward>();
    node->x = xc.detach();
    node->scale = sc.detach();
    node->mean = mean;
    node->rstd = rstd;
    record(node, {x, shift, scale}, {out});
  }
  return out;
}

Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& h) {
  const char* op = "gated_residual";
  detail::check_floating(op, x, "x");
  detail::check_floating(op, gate, "gate");
  detail::check_floating(op, h, "h");
  LOOM_CHECK(x.dim() == 3) << op << ": x must be (B, T, C), got " << x.shape();
  detail::check_shape(op, gate, {x.size(0), x.size(2)}, "gate");
  detail::check_shape(op, h, x.shape(), "h");
  detail::check_same_dtype(op, x, gate);
  detail::check_same_dtype(op, x, h);
  Tensor xc = detail::raw_contiguous(x), gc = detail::raw_contiguous(gate),
         hc = detail::raw_contiguous(h);
  Tensor out = detail::empty_like(xc);  // (B, T, C)
  backend_of(x).gated_residual_forward(xc, gc, hc, out);
  if (any_requires_grad({x, gate, h})) {
    auto node = std::make_shared<GatedResidualBackward>();
    node->gate = gc.detach();
    node->h = hc.detach();
    record(node, {x, gate, h}, {out});
  }
  return out;
}

}  // namespace loom
