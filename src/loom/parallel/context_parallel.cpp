#include "loom/parallel/context_parallel.h"

#include <cmath>
#include <memory>

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

std::vector<int64_t> load_balanced_positions(int64_t T, int64_t rank, int64_t P) {
  LOOM_CHECK(T % (2 * P) == 0) << "load-balanced causal sharding: " << T
                               << " positions do not split into " << 2 * P << " chunks";
  const int64_t c = T / (2 * P);
  std::vector<int64_t> out;
  for (int64_t chunk : {rank, 2 * P - 1 - rank})
    for (int64_t i = 0; i < c; ++i) out.push_back(chunk * c + i);
  return out;
}

namespace {

// Far below any score, but finite: a row with every key masked stays finite, and its weight in
// the merge, exp(lse - total), is exactly 0.
constexpr float kMasked = -1e30f;

// Attention of q to one key/value block: the output and its log-sum-exp per query row.
struct Partial {
  Tensor out, lse;  // (B, H, n, D), (B, H, n, 1)
};

Partial attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), m = k.size(2), G = H / Hkv;
  // Key/value heads repeated for their query groups: (B, H, m, D).
  auto repeat = [&](const Tensor& t) {
    return reshape(expand(unsqueeze(t, 2), {B, Hkv, G, m, D}), {B * H, m, D});
  };
  Tensor scores = mul_scalar(matmul(reshape(q, {B * H, n, D}), transpose(repeat(k), 1, 2)),
                             1.0 / std::sqrt(double(D)));  // (B H, n, m)
  if (mask.defined()) scores = add(scores, mask);
  Tensor mx;
  {
    NoGradGuard no_grad;
    mx = contiguous(max(scores, {2}, true)).detach();
  }
  Tensor p = exp(sub(scores, mx));
  Tensor l = sum(p, {2}, true);
  Tensor out = div(matmul(p, repeat(v)), l);
  return {reshape(out, {B, H, n, D}), reshape(add(log(l), mx), {B, H, n, 1})};
}

// kMasked where key position > query position.
Tensor causal_mask(const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos) {
  std::vector<float> m;
  for (int64_t a : qpos)
    for (int64_t b : kpos) m.push_back(b > a ? kMasked : 0.0f);
  return from_vector(m, {int64_t(qpos.size()), int64_t(kpos.size())});
}

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                      bool causal, const GroupPtr& group) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) % k.size(1) == 0 &&
             positions.numel() == q.size(2) && k.size(2) == q.size(2))
      << "ring_attention: expected q (B, H, n, D), k/v (B, Hkv, n, D) and n positions, got "
      << q.shape() << ", " << k.shape() << ", " << v.shape() << ", " << positions.shape();
  const int64_t P = group->size();
  const std::vector<int64_t> qpos = to_vector_i64(positions);
  Tensor kb = k, vb = v, pb = positions;
  std::vector<Partial> parts;
  for (int64_t step = 0; step < P; ++step) {
    // Start moving the block on while this one is used.
    std::unique_ptr<RingShift> next_k, next_v, next_p;
    if (step + 1 < P) {
      next_k = std::make_unique<RingShift>(kb, 1, group);
      next_v = std::make_unique<RingShift>(vb, 1, group);
      next_p = std::make_unique<RingShift>(pb, 1, group);
    }
    Tensor mask;
    if (causal) mask = causal_mask(qpos, to_vector_i64(pb));
    parts.push_back(attend(q, kb, vb, mask));
    if (next_k) {
      kb = next_k->finish();
      vb = next_v->finish();
      pb = next_p->finish().detach();
    }
  }
  // Online-softmax merge: out = sum_i out_i exp(lse_i - lse), lse = log sum_i exp(lse_i).
  Tensor top;
  {
    NoGradGuard no_grad;
    top = parts[0].lse.detach();
    for (size_t i = 1; i < parts.size(); ++i) top = max(cat({top, parts[i].lse.detach()}, -1), {-1}, true);
    top = contiguous(top).detach();
  }
  Tensor total;
  for (const Partial& part : parts) {
    Tensor w = exp(sub(part.lse, top));
    total = total.defined() ? add(total, w) : w;
  }
  Tensor lse = add(log(total), top);
  Tensor out;
  for (const Partial& part : parts) {
    Tensor term = mul(part.out, exp(sub(part.lse, lse)));
    out = out.defined() ? add(out, term) : term;
  }
  return out;
}

}  // namespace loom::parallel
