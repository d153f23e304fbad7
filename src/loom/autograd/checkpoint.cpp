#include "loom/autograd/checkpoint.h"

#include "loom/autograd/engine.h"
#include "loom/autograd/node.h"

namespace loom {

namespace {

struct CheckpointBackward : Node {
  CheckpointFn fn;
  std::vector<Tensor> saved_inputs;  // detached: the only activations kept

  const char* name() const override { return "CheckpointBackward"; }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    LOOM_CHECK(fn) << "checkpoint: backward ran twice without retain_graph";
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < saved_inputs.size(); ++i) {
      Tensor leaf = saved_inputs[i].detach();
      if (inputs[i].active()) leaf.set_requires_grad(true);
      leaves.push_back(leaf);
    }
    std::vector<Tensor> outputs;
    {
      EnableGradGuard enable;
      outputs = fn(leaves);
    }
    LOOM_CHECK(outputs.size() == grad_outputs.size())
        << "checkpoint: the recompute returned " << outputs.size() << " outputs, the forward "
        << grad_outputs.size();
    std::vector<Tensor> roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (grad_outputs[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) loom::backward(roots, grads);
    std::vector<Tensor> result;
    for (const Tensor& leaf : leaves) result.push_back(leaf.requires_grad() ? leaf.grad() : Tensor());
    return result;
  }

  void release() override {
    saved_inputs.clear();
    fn = nullptr;
  }
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  if (!grad_mode_enabled()) return outputs;
  auto node = std::make_shared<CheckpointBackward>();
  node->fn = fn;
  for (const Tensor& t : inputs) node->saved_inputs.push_back(t.detach());
  // Recorded even when no explicit input requires grad: parameters captured by fn may.
  std::vector<Tensor> detached;
  for (const Tensor& t : outputs) detached.push_back(t.detach());
  record(node, inputs, detached, /*always=*/true);
  return detached;
}

}  // namespace loom
