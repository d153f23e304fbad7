// An elastic restart's layout: when ranks are lost for good or excluded, `loom launch
// --min-ranks K` restarts the run on fewer processes with the same global batch, regrouped
// into more micro-batches (train/resume_rules.h: batch_size x grad_accum kept), so every step
// still sees the same samples and each rank's micro-batch is no larger than it was. Under
// DiLoCo the run goes on with fewer workers, each of the same layout (a worker leaves; the outer
// step averages over those present), and grows back to all of them (a worker rejoins,
// continuing a present worker's state: train/checkpointer.h).
#pragma once
#include <cstdint>
#include <optional>

#include "loom/dist/device_mesh.h"

namespace loom::train {

struct ElasticLayout {
  int64_t processes = 0, batch_size = 0, grad_accum = 0;
  int64_t workers = 0;  // DiLoCo's workers on `processes` (0: no DiLoCo)
};

// The largest world in [min_ranks, most] that `dims` (the run's parallel degrees, one of them
// -1: filled by the world) resolves on, with the global batch batch_size x grad_accum split
// evenly over its data-parallel ranks in the fewest micro-batches whose per-rank share is at
// most the one `world` ranks had. None when no world in the range allows it. diloco: the
// dp_replicate groups are DiLoCo's workers, and their number changes instead of their layout.
std::optional<ElasticLayout> elastic_layout(const dist::ParallelDims& dims, int64_t batch_size,
                                            int64_t grad_accum, int64_t world, int64_t most,
                                            int64_t min_ranks, bool diloco = false);

}  // namespace loom::train
