// The backward engine: runs the graph behind `roots` in reverse topological order.
#pragma once
#include <vector>

#include "loom/autograd/node.h"

namespace loom {

// Computes gradients of `root` (a scalar unless `grad` is given) with respect to every leaf
// that requires grad, accumulating into leaf.grad and calling its post-accumulate hooks.
// With retain_graph=false, saved tensors are released as soon as each node has run.
void backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false);
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

}  // namespace loom
