#include "loom/ops/rope.h"

#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {
struct RopeBackward : Node {
  Tensor positions;
  double theta;
  RopeScaling scaling;
  const char* name() const override { return "RopeBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gy = detail::raw_contiguous(g[0]);
    Tensor gx = detail::empty_like(gy);                                        // (B, H, T, D)
    backend_of(gy).rope(gy, positions, theta, scaling, /*inverse=*/true, gx);  // R^T = R^-1
    return {gx, Tensor()};
  }
  void release() override { positions = Tensor(); }
};
}  // namespace

Tensor rope(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling) {
  detail::check_floating("rope", x, "input");
  detail::check_defined("rope", positions, "positions");
  LOOM_CHECK(x.dim() == 4 && x.size(3) % 2 == 0)
      << "rope: expected x of shape (B, H, T, D) with even D, got " << x.shape();
  LOOM_CHECK(positions.dtype() == DType::I64 && positions.dim() == 1 &&
             positions.size(0) == x.size(2))
      << "rope: positions must be i64 of shape (" << x.size(2) << "), got "
      << dtype_name(positions.dtype()) << " " << positions.shape();
  Tensor xc = detail::raw_contiguous(x),
         pc = detail::raw_contiguous(detail::raw_to_device(positions, x.device()));
  Tensor out = detail::empty_like(xc);  // (B, H, T, D)
  LOOM_CHECK(scaling.factor >= 1 && scaling.low_freq_factor > 0 &&
             scaling.high_freq_factor > scaling.low_freq_factor && scaling.original_context > 0)
      << "rope: scaling factor " << scaling.factor << " (>= 1), low_freq_factor "
      << scaling.low_freq_factor << " (> 0) below high_freq_factor " << scaling.high_freq_factor
      << ", original context " << scaling.original_context << " (> 0)";
  backend_of(x).rope(xc, pc, theta, scaling, /*inverse=*/false, out);
  if (any_requires_grad({x})) {
    auto node = std::make_shared<RopeBackward>();
    node->positions = pc;
    node->theta = theta;
    node->scaling = scaling;
    record(node, {x, positions}, {out});
  }
  return out;
}

}  // namespace loom
