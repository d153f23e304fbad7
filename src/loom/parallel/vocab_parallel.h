// Tensor parallelism over the vocabulary: rank r of `group` (P ranks) holds rows
// [r V/P, (r+1) V/P) of an embedding table, or those columns of a model's logits. The full
// (rows x V) logits are never gathered: cross-entropy needs only three numbers per row from
// the other ranks (the max, the sum of exponentials, the target's logit).
#pragma once
#include "loom/parallel/functional.h"

namespace loom::parallel {

// ids (...) i64 in [0, V); weight_shard (V/P, C) -> (..., C), the same on every rank. Each rank
// looks up the ids in its rows (zeros elsewhere) and the ranks sum. Backward: each rank's rows
// get the gradients of their ids (what follows must run the same on every rank).
Tensor vocab_parallel_embedding(const Tensor& ids, const Tensor& weight_shard,
                                const GroupPtr& group);

// logits_shard (..., V/P) f32: this rank's vocabulary columns; targets (...) i64 in [0, V) or
// ignore_index. Mean over non-ignored targets of -log softmax(logits)[target], the same scalar
// on every rank; its gradient reaches each rank's shard.
Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    const GroupPtr& group, int64_t ignore_index = -100);

}  // namespace loom::parallel
