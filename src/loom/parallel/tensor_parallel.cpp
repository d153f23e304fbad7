#include "loom/parallel/tensor_parallel.h"

#include "loom/ops/ops.h"

namespace loom::parallel {

Tensor column_parallel_linear(const Tensor& x, const Tensor& weight_shard, const Tensor& bias_shard,
                              const GroupPtr& group, int64_t seq_dim) {
  // Replicated input: identity forward, its gradient summed over the ranks. Sequence-split
  // input: gathered forward, its gradient reduce-scattered back.
  const Tensor whole = seq_dim < 0 ? copy_to_group(x, group) : all_gather_along(x, seq_dim, group);
  return linear(whole, weight_shard, bias_shard);
}

Tensor row_parallel_linear(const Tensor& x_shard, const Tensor& weight_shard, const Tensor& bias,
                           const GroupPtr& group, int64_t seq_dim) {
  const Tensor partial = linear(x_shard, weight_shard);
  const Tensor out = seq_dim < 0 ? reduce_from_group(partial, group)
                                 : reduce_scatter_along(partial, seq_dim, group);
  return bias.defined() ? add(out, bias) : out;
}

}  // namespace loom::parallel
