#include "loom/parallel/context_parallel.h"

#include "loom/ops/ops.h"

namespace loom::parallel {

Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         const GroupPtr& group) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
      << "ulysses_attention: expected (B, H, T/P, D) tensors, got " << q.shape() << ", "
      << k.shape() << ", " << v.shape();
  const int64_t P = group->size();
  LOOM_CHECK(q.size(1) % P == 0 && k.size(1) % P == 0)
      << "ulysses_attention: " << q.size(1) << " query and " << k.size(1) << " key/value heads "
      << "do not split over the " << P << " ranks of " << group->describe();
  // Heads scattered, sequence gathered: (B, H/P, T, D) in sequence order (rank j sent chunk j).
  auto to_heads = [&](const Tensor& x) { return all_to_all_along(x, 1, 2, group); };
  Tensor out = scaled_dot_product_attention(to_heads(q), to_heads(k), to_heads(v), Tensor(), causal);
  return all_to_all_along(out, 2, 1, group);  // back to (B, H, T/P, D)
}

}  // namespace loom::parallel
