// Expert parallelism: the experts of every mixture (nn::MoE) split over the ranks of an `ep`
// group carved from the data-parallel ranks -- rank q keeps experts [q E/P, (q + 1) E/P) of
// each layer -- while the rest of the model stays replicated. Each layer's tokens, already
// sorted by expert on their own rank, go to the ranks of their experts by an all-to-all with
// variable counts, run there as that rank's grouped GEMMs, and come back the same way
// (parallel/functional.h: the backward runs the conjugate all-to-alls). The model is not
// changed: the layer's `experts` hook is set from outside.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "loom/dist/process_group.h"
#include "loom/nn/module.h"
#include "loom/parallel/tensor_parallel.h"

namespace loom::parallel {

// The expert parameters it split (by full name; the shard's ranks are the ep group's).
struct ExpertParallelLayout {
  std::map<std::string, TensorShard> sharded;
};

// Collective-free, before any forward: every rank holds the whole model (same values) and
// keeps its experts. Errors when a layer's experts do not divide over the group.
ExpertParallelLayout apply_expert_parallel(nn::Module& model,
                                           std::shared_ptr<dist::ProcessGroup> ep);

}  // namespace loom::parallel
