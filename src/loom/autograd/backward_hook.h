// A hook that runs when backward reaches a tensor: how ZeRO-3 learns that a block's backward is
// about to start (its output's gradient is complete) and gathers the block's parameters first.
#pragma once
#include <functional>

#include "loom/core/tensor.h"

namespace loom {

// Returns x unchanged (a view of the same data). When gradients are recorded, backward calls
// hook() once the gradient of the returned tensor is complete -- before any node that
// produced x runs -- and then passes that gradient on to x untouched.
Tensor with_backward_hook(const Tensor& x, std::function<void()> hook);

}  // namespace loom
