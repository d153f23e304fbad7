// The backward engine: runs the graph behind `roots` in reverse topological order.
#pragma once
#include <functional>
#include <vector>

#include "loom/autograd/node.h"

namespace loom {

// Computes gradients of `root` (a scalar unless `grad` is given) with respect to every leaf
// that requires grad, accumulating into leaf.grad and calling its post-accumulate hooks.
// With retain_graph=false, saved tensors are released as soon as each node has run.
void backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false);
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

// Adds grad into the leaf's .grad and calls its post-accumulate hooks, as backward does.
void accumulate_grad(const Tensor& leaf, const Tensor& grad);

// A backward split in two (zero-bubble pipelining): while a Scope of one is alive on this
// thread, ops that can (linear) leave their weights' gradients out of backward -- which then
// makes only what the inputs need -- and queue them here; run() makes and accumulates them
// later, hooks included, as backward would have. The queued work keeps what it reads alive.
class DeferredWeightGradients {
 public:
  class Scope {
   public:
    explicit Scope(DeferredWeightGradients& sink);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    DeferredWeightGradients* outer_;
  };
  static DeferredWeightGradients* current();  // the innermost Scope's, or nullptr
  void add(std::function<void()> work) { work_.push_back(std::move(work)); }
  void run();  // in the order queued, then empty

 private:
  std::vector<std::function<void()>> work_;
};

}  // namespace loom
