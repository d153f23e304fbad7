// Activation checkpointing applied from outside: each block's forward keeps only its inputs,
// and backward runs the block again to get the activations it needs (autograd/checkpoint.h).
// "full": memory for activations drops from every block's to one block's plus the blocks'
// inputs, for about one more forward of compute. "selective": the blocks also keep the outputs
// of their matmuls and attention, and the recompute redoes only the cheap ops between them
// (norms, activations, modulation, residual adds): less memory saved, almost no compute added.
// Composes with ZeRO-3 (its wrapper runs outside this one, so a block's parameters are gathered
// before the recompute needs them).
#pragma once
#include <string>
#include <vector>

#include "loom/nn/module.h"
#include "loom/parallel/topology.h"  // Recompute

namespace loom::parallel {

// Every block named, by `policy`.
void apply_activation_checkpointing(nn::Module& model, const std::vector<std::string>& block_names,
                                    Recompute policy);

}  // namespace loom::parallel
