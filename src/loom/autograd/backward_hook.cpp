#include "loom/autograd/backward_hook.h"

#include "loom/autograd/node.h"

namespace loom {

namespace {

struct BackwardHookNode : Node {
  std::function<void()> hook;
  const char* name() const override { return "BackwardHook"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    hook();
    return {g[0]};
  }
};

}  // namespace

Tensor with_backward_hook(const Tensor& x, std::function<void()> hook) {
  if (!grad_mode_enabled() || !x.requires_grad()) return x;
  Tensor out = x.detach();
  auto node = std::make_shared<BackwardHookNode>();
  node->hook = std::move(hook);
  record(node, {x}, {out});
  return out;
}

}  // namespace loom
