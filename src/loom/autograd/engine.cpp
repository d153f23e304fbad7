#include "loom/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "loom/backend/backend.h"
#include "loom/core/trace.h"

namespace loom {

namespace {

// a + b into a fresh tensor (the engine never writes into a gradient it did not allocate).
Tensor add_fresh(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).binary(BinaryOp::Add, a, b, out);
  return out;
}

void check_grad(const Tensor& grad, const Tensor& like_shape_of, const char* where) {
  LOOM_CHECK(grad.shape() == like_shape_of.shape())
      << "autograd: " << where << " produced a gradient of shape " << grad.shape()
      << " for an input of shape " << like_shape_of.shape();
}

void accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf_impl, const Tensor& grad,
                          const char* from) {
  Tensor leaf(leaf_impl);
  LOOM_CHECK(grad.shape() == leaf.shape())
      << "autograd: " << from << " produced a gradient of shape " << grad.shape()
      << " for a leaf of shape " << leaf.shape();
  Backend& be = backend_for(leaf.device());
  Tensor current = leaf.grad();
  if (!current.defined()) {
    // The leaf's .grad is a tensor of its own: contiguous, leaf dtype, counted as gradients.
    // Reuse the incoming buffer when nothing else can see it, else copy.
    const bool can_steal = grad.is_contiguous() && grad.dtype() == leaf.dtype() &&
                           grad.impl_ptr().use_count() <= 2 && grad.storage().use_count() == 1 &&
                           grad.offset() == 0 && grad.nbytes() == grad.storage()->nbytes();
    Tensor g;
    if (can_steal) {
      g = grad.detach();
      g.storage()->set_category(MemCategory::Gradients);
    } else {
      g = Tensor::empty(leaf.shape(), leaf.dtype(), leaf.device(), MemCategory::Gradients);
      be.copy(grad, g);
    }
    leaf.set_grad(g);
  } else {
    LOOM_CHECK(current.is_contiguous()) << "autograd: leaf .grad must be contiguous";
    if (grad.dtype() == current.dtype()) {
      be.binary(BinaryOp::Add, current, grad, current);
    } else {
      Tensor converted = Tensor::empty(current.shape(), current.dtype(), current.device());
      be.copy(grad, converted);
      be.binary(BinaryOp::Add, current, converted, current);
    }
  }
  for (const TensorHook& hook : leaf.post_accumulate_hooks()) hook(leaf);
}

// Node::backward_into for n when its input 0 is a leaf that already has a .grad.
bool accumulated_in_place(Node* n, const std::vector<Tensor>& grad_outputs) {
  if (n->inputs.empty() || !n->inputs[0].leaf) return false;
  Tensor leaf(n->inputs[0].leaf);
  const Tensor current = leaf.grad();
  if (!current.defined() || !current.is_contiguous() || current.dtype() != leaf.dtype())
    return false;
  if (!n->backward_into(grad_outputs, current)) return false;
  for (const TensorHook& hook : leaf.post_accumulate_hooks()) hook(leaf);
  return true;
}

struct LaterFirst {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

}  // namespace

void accumulate_grad(const Tensor& leaf, const Tensor& grad) {
  accumulate_into_leaf(leaf.impl_ptr(), grad, "a deferred weight gradient");
}

namespace {
thread_local DeferredWeightGradients* deferred_sink = nullptr;
}  // namespace

DeferredWeightGradients::Scope::Scope(DeferredWeightGradients& sink) : outer_(deferred_sink) {
  deferred_sink = &sink;
}
DeferredWeightGradients::Scope::~Scope() {
  deferred_sink = outer_;
}
DeferredWeightGradients* DeferredWeightGradients::current() {
  return deferred_sink;
}
void DeferredWeightGradients::run() {
  NoGradGuard no_grad;
  std::vector<std::function<void()>> work;
  work.swap(work_);
  for (auto& w : work) w();
}

void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad}, retain_graph);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  LOOM_CHECK(roots.size() == grads.size())
      << "backward: " << roots.size() << " roots but " << grads.size() << " gradients";
  NoGradGuard no_grad;              // backward computations are not themselves recorded
  AutocastGuard exact(DType::F32);  // nodes compute in the dtypes their forward saved

  // Seed gradients: ones for scalar roots without an explicit gradient.
  std::vector<Tensor> seeds(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    LOOM_CHECK(r.defined() && r.requires_grad())
        << "backward: root " << i << " does not require grad (was it computed from tensors "
        << "with requires_grad, outside a NoGradGuard?)";
    if (grads[i].defined()) {
      check_grad(grads[i], r, "the given root gradient");
      seeds[i] = grads[i];
    } else {
      LOOM_CHECK(r.numel() == 1) << "backward: root of shape " << r.shape()
                                 << " is not a scalar; pass its gradient explicitly";
      seeds[i] = Tensor::empty(r.shape(), r.dtype(), r.device());
      backend_for(r.device()).fill(seeds[i], 1.0);
    }
  }

  // Count, for every node reachable from the roots, how many edges point at it.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> stack;
  for (const Tensor& r : roots) {
    if (Node* n = r.grad_fn().get(); n && !keep_alive.count(n)) {
      keep_alive[n] = r.grad_fn();
      stack.push_back(n);
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->inputs) {
      if (!e.node) continue;
      dependencies[e.node.get()]++;
      if (!keep_alive.count(e.node.get())) {
        keep_alive[e.node.get()] = e.node;
        stack.push_back(e.node.get());
      }
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto add_to_buffer = [&](Node* n, uint32_t slot, const Tensor& g) {
    auto& buf = buffers[n];
    if (buf.empty()) buf.resize(n->num_outputs);
    buf[slot] = buf[slot].defined() ? add_fresh(buf[slot], g) : g;
  };

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (Node* n = roots[i].grad_fn().get()) {
      add_to_buffer(n, roots[i].output_nr(), seeds[i]);
    } else {
      accumulate_into_leaf(roots[i].impl_ptr(), seeds[i], "backward root");
    }
  }
  for (auto& [n, _] : buffers)
    if (dependencies[n] == 0) ready.push(n);

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grad_outputs;
    if (auto it = buffers.find(n); it != buffers.end()) {
      grad_outputs = std::move(it->second);
      buffers.erase(it);
    }
    std::vector<Tensor> grad_inputs;
    if (!grad_outputs.empty()) {  // else no gradient reached this node: only pass through
      grad_outputs.resize(n->num_outputs);
      trace::Scope scope(n->name(), "backward");
      if (scope.active() && n->trace_module)
        scope.set_args(std::string("\"module\": \"") + n->trace_module + "\"");
      if (accumulated_in_place(n, grad_outputs)) {
        grad_inputs.resize(n->inputs.size());  // none left: it went into the leaf's .grad
      } else {
        grad_inputs = n->backward(grad_outputs);
      }
      grad_outputs.clear();
      if (!retain_graph) n->release();
      LOOM_CHECK(grad_inputs.size() == n->inputs.size())
          << "autograd: " << n->name() << " returned " << grad_inputs.size() << " gradients for "
          << n->inputs.size() << " inputs";
    }
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Edge& e = n->inputs[i];
      const Tensor g = grad_inputs.empty() ? Tensor() : grad_inputs[i];
      if (e.leaf && g.defined()) accumulate_into_leaf(e.leaf, g, n->name());
      if (!e.node) continue;
      if (g.defined()) add_to_buffer(e.node.get(), e.output_nr, g);
      if (--dependencies[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  if (!retain_graph) {
    for (auto& [n, _] : keep_alive) n->release();
  }
}

}  // namespace loom
