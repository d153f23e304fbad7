// Activation checkpointing: run a function without keeping its activations, and run it
// again during backward to get them back.
#pragma once
#include <functional>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Returns fn(inputs). Only the inputs are saved; the backward recomputes fn with recording
// on and backpropagates through the recomputed graph. Parameters that fn uses (captured
// leaves) receive their gradients during that recompute, as they would without checkpointing.
// fn must be deterministic (Loom's ops are; random ops take explicit Philox keys).
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace loom
