#include "loom/ops/modulate.h"

#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {
struct ModulateBackward : Node {
  Tensor x, scale;
  const char* name() const override { return "ModulateBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = detail::empty_like(x), gshift = detail::empty_like(scale),
           gscale = detail::empty_like(scale);
    backend_of(x).modulate_backward(x, scale, detail::raw_contiguous(g[0]), gx, gshift, gscale);
    return {gx, gshift, gscale};
  }
  void release() override { x = scale = Tensor(); }
};
}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  detail::check_floating("modulate", x, "x");
  detail::check_floating("modulate", shift, "shift");
  detail::check_floating("modulate", scale, "scale");
  LOOM_CHECK(x.dim() == 3) << "modulate: x must be (B, T, C), got " << x.shape();
  detail::check_shape("modulate", shift, {x.size(0), x.size(2)}, "shift");
  detail::check_shape("modulate", scale, {x.size(0), x.size(2)}, "scale");
  detail::check_same_dtype("modulate", x, shift);
  detail::check_same_dtype("modulate", x, scale);
  Tensor xc = detail::raw_contiguous(x), sh = detail::raw_contiguous(shift),
         sc = detail::raw_contiguous(scale);
  Tensor out = detail::empty_like(xc);
  backend_of(x).modulate_forward(xc, sh, sc, out);
  if (any_requires_grad({x, shift, scale})) {
    auto node = std::make_shared<ModulateBackward>();
    node->x = xc.detach();
    node->scale = sc.detach();
    record(node, {x, shift, scale}, {out});
  }
  return out;
}

}  // namespace loom
