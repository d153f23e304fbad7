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
//
// keep_expensive (selective checkpointing): the outputs of the expensive ops fn runs -- matmuls
// and attention -- are kept from the forward and handed back in the recompute, which redoes
// only the cheap ones (norms, activations, elementwise): more memory than recomputing
// everything, almost no extra compute.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               bool keep_expensive = false);

// What an expensive op wraps its computation in: inside a selective checkpoint's forward it
// runs compute() and keeps the outputs, inside its recompute it returns the kept outputs (in
// the same order) without computing; elsewhere it runs compute().
std::vector<Tensor> computed_or_kept(const std::function<std::vector<Tensor>()>& compute);

}  // namespace loom
