#include "loom/autograd/checkpoint.h"

#include "loom/autograd/engine.h"
#include "loom/autograd/node.h"

namespace loom {

namespace {

// The expensive ops' outputs of one selective checkpoint: recorded in its forward, handed back
// in order by its recompute.
struct KeptOutputs {
  std::vector<std::vector<Tensor>> outputs;
  size_t next = 0;
  bool replay = false;
};

thread_local KeptOutputs* active_kept = nullptr;

// Makes `kept` the active record for a scope.
class KeptScope {
 public:
  explicit KeptScope(KeptOutputs* kept) : previous_(active_kept) { active_kept = kept; }
  ~KeptScope() { active_kept = previous_; }
  KeptScope(const KeptScope&) = delete;
  KeptScope& operator=(const KeptScope&) = delete;

 private:
  KeptOutputs* previous_;
};

struct CheckpointBackward : Node {
  CheckpointFn fn;
  std::vector<Tensor> saved_inputs;   // detached: the only activations kept (and, selective,
  std::shared_ptr<KeptOutputs> kept;  // the expensive ops' outputs)
  DType autocast = DType::F32;        // the forward's mode, which the recompute repeats

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
      AutocastGuard mode(autocast);
      if (kept) kept->replay = true;
      {
        KeptScope scope(kept.get());
        outputs = fn(leaves);
      }
      if (kept) {
        LOOM_CHECK(kept->next == kept->outputs.size())
            << "selective checkpoint: the recompute ran " << kept->next << " expensive ops, the "
            << "forward " << kept->outputs.size();
        kept.reset();  // the recomputed graph holds what it needs
      }
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
    for (const Tensor& leaf : leaves)
      result.push_back(leaf.requires_grad() ? leaf.grad() : Tensor());
    return result;
  }

  void release() override {
    saved_inputs.clear();
    kept.reset();
    fn = nullptr;
  }
};

}  // namespace

std::vector<Tensor> computed_or_kept(const std::function<std::vector<Tensor>()>& compute) {
  KeptOutputs* kept = active_kept;
  if (!kept) return compute();
  if (kept->replay) {
    LOOM_CHECK(kept->next < kept->outputs.size())
        << "selective checkpoint: the recompute runs more expensive ops than the forward ("
        << kept->outputs.size() << ")";
    std::vector<Tensor> out;
    for (const Tensor& t : kept->outputs[kept->next]) out.push_back(t.detach());
    ++kept->next;
    return out;
  }
  std::vector<Tensor> out = compute();
  std::vector<Tensor> copy;
  for (const Tensor& t : out) copy.push_back(t.detach());
  kept->outputs.push_back(std::move(copy));
  return out;
}

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               bool keep_expensive) {
  const bool recording = grad_mode_enabled();
  auto kept = keep_expensive && recording ? std::make_shared<KeptOutputs>() : nullptr;
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    KeptScope scope(kept.get());
    outputs = fn(inputs);
  }
  if (!recording) return outputs;
  auto node = std::make_shared<CheckpointBackward>();
  node->fn = fn;
  node->kept = kept;
  node->autocast = autocast_dtype();
  for (const Tensor& t : inputs) node->saved_inputs.push_back(t.detach());
  // Recorded even when no explicit input requires grad: parameters captured by fn may.
  std::vector<Tensor> detached;
  for (const Tensor& t : outputs) detached.push_back(t.detach());
  record(node, inputs, detached, /*always=*/true);
  return detached;
}

}  // namespace loom
