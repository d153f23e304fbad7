// What one rank of a layout holds at its peak, by memory category (core/allocator.h), before
// anything runs: `loom train --dry-run`'s table. Parameters, gradients, optimizer state and
// communication buffers follow from the model's parameters (a model built but never
// initialised: its memory reserved, not touched), its parallel plan and the layout's rules
// (pipeline stages, tensor and expert splits, what ZeRO shards and which buffers it keeps).
// Activations are counted per token from what each block's ops keep for backward (f32; see
// docs/performance.md), times the micro-batches a pipeline schedule holds at once, plus the
// largest transient of backward. A prediction: checked against measured runs by tests.
#pragma once
#include <cstdint>
#include <vector>

#include "loom/nn/module.h"
#include "loom/nn/parallel_plan.h"
#include "loom/parallel/topology.h"
#include "loom/plan/cost_model.h"

namespace loom::plan {

struct MemoryLayout {
  parallel::Topology topology;  // dims resolved (dp_shard >= 1)
  int64_t micro_batches = 1;    // train.grad_accum (a pipeline's micro-batches)
  bool ema = false;             // an EMA of the weights (the DiT's)
};

struct RankMemory {
  int64_t pp_rank = 0;
  int64_t blocks = 0;  // blocks this rank holds
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, communication = 0;
  // Of `gradients`, what a rank holds only where a block's reduce-scatter has not arrived by
  // the time the next block's gradients are made (ZeRO-2/3): by timing, it varies by step.
  double gradients_by_timing = 0;
  double total() const { return parameters + gradients + optimizer + activations + communication; }
};

// One entry per pipeline rank (every rank of a stage holds as much). `shape.batch` is the
// global batch of one micro-batch (train.batch_size); `model` and `plan` the whole model's.
std::vector<RankMemory> predict_memory(const nn::Module& model, const nn::ParallelPlan& plan,
                                       const StepShape& shape, const MemoryLayout& layout);

}  // namespace loom::plan
