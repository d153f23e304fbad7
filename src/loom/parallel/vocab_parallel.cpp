#include "loom/parallel/vocab_parallel.h"

#include "loom/autograd/node.h"
#include "loom/ops/ops.h"

namespace loom::parallel {

namespace {

// For ids (read on the host: they are small), this rank's row of each id (0 where another rank
// owns it; on the host, as index ops take them) and a 1/0 mask of the ids it owns (on `device`,
// where it multiplies). Ids outside [0, V) other than `ignore` are an error.
struct LocalIds {
  Tensor rows, mask;
};

LocalIds local_ids(const Tensor& ids, int64_t shard, const dist::ProcessGroup& g, int64_t ignore,
                   Device device, const char* what) {
  const int64_t lo = g.rank() * shard, vocab = shard * g.size();
  std::vector<int64_t> rows;
  std::vector<float> mask;
  for (int64_t id : to_vector_i64(ids)) {
    LOOM_CHECK((id >= 0 && id < vocab) || id == ignore)
        << what << ": id " << id << " is outside the vocabulary [0, " << vocab << ")";
    const bool mine = id >= lo && id < lo + shard;
    rows.push_back(mine ? id - lo : 0);
    mask.push_back(mine ? 1.0f : 0.0f);
  }
  const int64_t n = int64_t(rows.size());
  return {from_vector(rows, {n}), to_device(from_vector(mask, {n, 1}), device)};
}

}  // namespace

Tensor vocab_parallel_embedding(const Tensor& ids, const Tensor& weight_shard,
                                const GroupPtr& group) {
  LOOM_CHECK(weight_shard.dim() == 2)
      << "vocab_parallel_embedding: table shard " << weight_shard.shape() << " is not (rows, C)";
  const int64_t C = weight_shard.size(1);
  const LocalIds local = local_ids(ids, weight_shard.size(0), *group, /*ignore=*/-1,
                                   weight_shard.device(), "vocab_parallel_embedding");
  Tensor rows = mul(index_select(weight_shard, 0, local.rows),
                    expand(local.mask, {local.rows.numel(), C}));  // (n, C)
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  return reshape(reduce_from_group(rows, group), out_shape);
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    const GroupPtr& group, int64_t ignore_index) {
  const int64_t shard = logits_shard.size(-1), n = logits_shard.numel() / shard;
  LOOM_CHECK(targets.numel() == n) << "vocab_parallel_cross_entropy: " << targets.numel()
                                   << " targets for " << n << " rows of logits";
  Tensor z = reshape(logits_shard, {n, shard});
  // The row max over the whole vocabulary: log-sum-exp shifted by it does not depend on it, so
  // it carries no gradient.
  Tensor m;
  {
    NoGradGuard no_grad;
    m = contiguous(max(z, {1}, /*keepdim=*/true)).detach();
    Tensor owned = Tensor::empty(m.shape(), m.dtype(), m.device());
    copy_(owned, m);
    group->all_reduce(owned, dist::ReduceOp::Max)->wait();
    m = owned;
  }
  Tensor sum_exp = reduce_from_group(sum(exp(sub(z, expand(m, {n, shard}))), {1}), group);  // (n)
  const LocalIds local =
      local_ids(targets, shard, *group, ignore_index, z.device(), "vocab_parallel_cross_entropy");
  Tensor target_logit = reduce_from_group(
      reshape(mul(gather(z, 1, reshape(local.rows, {n, 1})), local.mask), {n}), group);
  // Per row: log sum exp(z) - z[target]; ignored rows weigh nothing.
  std::vector<float> valid;
  int64_t count = 0;
  for (int64_t t : to_vector_i64(targets)) {
    valid.push_back(t == ignore_index ? 0.0f : 1.0f);
    count += t != ignore_index;
  }
  Tensor row = sub(add(log(sum_exp), reshape(m, {n})), target_logit);
  Tensor weights = to_device(from_vector(valid, {n}), z.device());
  return mul_scalar(sum(mul(row, weights)), count > 0 ? 1.0 / double(count) : 0.0);
}

}  // namespace loom::parallel
