#include "loom/ops/ssm_scan.h"

#include "loom/autograd/node.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"

namespace loom {

using detail::backend_of;

namespace {

struct SsmScanBackward : Node {
  Tensor x, dt, A, Bm, Cm, checkpoints;
  int64_t every = 1;
  bool initial = false;  // whether the initial state is an input (it gets a gradient)
  const char* name() const override { return "SsmScanBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3);
    const int64_t G = Bm.size(2), N = Bm.size(3);
    const Device device = x.device();
    const Tensor dy = g[0].defined() ? contiguous(g[0]) : zeros(x.shape(), DType::F32, device);
    // The kernel turns the final state's gradient into the initial state's, in place.
    Tensor dstate = Tensor::empty({B, H, P, N}, DType::F32, device);
    if (g[1].defined())
      backend_of(x).copy(g[1], dstate);
    else
      backend_of(x).fill(dstate, 0.0);
    Tensor dx = Tensor::empty(x.shape(), DType::F32, device);
    Tensor ddt = Tensor::empty(dt.shape(), DType::F32, device);
    Tensor dA = Tensor::empty({B, H}, DType::F32, device);
    Tensor dB = Tensor::empty({B, T, H, N}, DType::F32, device);
    Tensor dC = Tensor::empty({B, T, H, N}, DType::F32, device);
    backend_of(x).ssm_scan_backward(x, dt, A, Bm, Cm, checkpoints, every, dy, dstate, dx, ddt, dA,
                                    dB, dC);
    // Per head -> per group: the heads of a group are consecutive.
    auto groups = [&](const Tensor& t) { return sum(reshape(t, {B, T, G, H / G, N}), {3}); };
    return {dx, ddt, sum(dA, {0}), groups(dB), groups(dC), initial ? dstate : Tensor()};
  }
  void release() override { x = dt = A = Bm = Cm = checkpoints = Tensor(); }
};

}  // namespace

SsmScanResult ssm_scan(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                       const Tensor& Cm, int64_t every, const Tensor& initial_state) {
  LOOM_CHECK(x.dim() == 4 && Bm.dim() == 4 && every > 0)
      << "ssm_scan: x (B, T, H, P) and Bm (B, T, G, N) with every > 0, got " << x.shape() << ", "
      << Bm.shape() << ", every " << every;
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = Bm.size(3);
  const Device device = x.device();
  const Tensor xc = contiguous(x), dtc = contiguous(dt), Ac = contiguous(A), Bc = contiguous(Bm),
               Cc = contiguous(Cm);
  // The kernel updates the state in place: a fresh buffer, the initial state copied in.
  Tensor state = Tensor::empty({B, H, P, N}, DType::F32, device);
  if (initial_state.defined()) {
    LOOM_CHECK(initial_state.shape() == state.shape())
        << "ssm_scan: initial_state must be " << state.shape() << ", got " << initial_state.shape();
    backend_of(x).copy(initial_state, state);
  } else {
    backend_of(x).fill(state, 0.0);
  }
  Tensor y = Tensor::empty(x.shape(), DType::F32, device);
  Tensor checkpoints = Tensor::empty({B, H, (T + every - 1) / every, P, N}, DType::F32, device);
  backend_of(x).ssm_scan_forward(xc, dtc, Ac, Bc, Cc, state, y, checkpoints, every);
  if (any_requires_grad({x, dt, A, Bm, Cm, initial_state})) {
    auto node = std::make_shared<SsmScanBackward>();
    node->x = xc.detach();
    node->dt = dtc.detach();
    node->A = Ac.detach();
    node->Bm = Bc.detach();
    node->Cm = Cc.detach();
    node->checkpoints = checkpoints;
    node->every = every;
    node->initial = initial_state.defined();
    record(node, {x, dt, A, Bm, Cm, initial_state}, {y, state});
  }
  return {y, state};
}

}  // namespace loom
