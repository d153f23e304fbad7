#include "loom/parallel/context_parallel.h"

#include <cmath>
#include <memory>

#include "loom/nn/layers.h"
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

std::vector<int64_t> context_parallel_rows(int64_t T, int64_t rank, int64_t P,
                                           ContextParallelKind kind) {
  if (kind == ContextParallelKind::Ring) return load_balanced_positions(T, rank, P);
  LOOM_CHECK(T % P == 0) << "context parallel: " << T << " positions do not split over " << P
                         << " ranks";
  std::vector<int64_t> out;
  for (int64_t i = rank * (T / P); i < (rank + 1) * (T / P); ++i) out.push_back(i);
  return out;
}

namespace {

// Every rank's rows one after another (ring: a permutation of 0..T-1), and its inverse.
std::vector<int64_t> rank_order(int64_t T, int64_t P, ContextParallelKind kind) {
  std::vector<int64_t> order;
  for (int64_t q = 0; q < P; ++q)
    for (int64_t i : context_parallel_rows(T, q, P, kind)) order.push_back(i);
  return order;
}

Tensor index_tensor(const std::vector<int64_t>& index) {
  return from_vector(index, {int64_t(index.size())});
}

}  // namespace

std::set<std::string> apply_context_parallel(nn::Module& model, const nn::ParallelPlan& plan,
                                             const GroupPtr& group, ContextParallelKind kind) {
  LOOM_CHECK(!plan.blocks.empty()) << "context parallel: the model names no blocks";
  const bool ring = kind == ContextParallelKind::Ring;
  const int64_t P = group->size(), rank = group->rank(), dim = plan.sequence_dim;
  // This rank's rows of the current forward: set where the region starts, read by attention.
  auto rows = std::make_shared<std::vector<int64_t>>();
  std::set<std::string> partial;
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    const bool first = i == 0, last = i + 1 == plan.blocks.size();
    model.submodule(plan.blocks[i]).add_forward_wrapper(
        [=](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
          std::vector<Tensor> args = in;
          if (first) {
            const int64_t T = args[0].size(dim);
            *rows = context_parallel_rows(T, rank, P, kind);
            // Ring: put every rank's rows one after another, so that a plain split hands each
            // its load-balanced chunks.
            const Tensor x = ring ? index_select(args[0], dim, index_tensor(rank_order(T, P, kind)))
                                  : args[0];
            args[0] = scatter_along(x, dim, group);
          }
          for (size_t k = 1; k < args.size(); ++k)  // whole conditioning used on a share of rows
            if (args[k].defined() && args[k].requires_grad()) args[k] = copy_to_group(args[k], group);
          Tensor out = fn(args);
          if (!last) return out;
          out = gather_along(out, dim, group);
          if (!ring) return out;
          const std::vector<int64_t> order = rank_order(out.size(dim), P, kind);
          std::vector<int64_t> inverse(order.size());
          for (size_t j = 0; j < order.size(); ++j) inverse[size_t(order[j])] = int64_t(j);
          return index_select(out, dim, index_tensor(inverse));
        });
    for (const auto& p : model.submodule(plan.blocks[i]).named_parameters())
      partial.insert(plan.blocks[i] + "." + p.name);
  }
  for (const auto& path : plan.attention) {
    auto* attn = dynamic_cast<nn::Attention*>(&model.submodule(path));
    LOOM_CHECK(attn) << "context parallel: " << path << " is not an attention module";
    if (ring)
      attn->core = [group](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                           bool causal) { return ring_attention(q, k, v, pos, causal, group); };
    else
      attn->core = [group](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&,
                           bool causal) { return ulysses_attention(q, k, v, causal, group); };
    // The positions of this rank's rows: the model's positions (if it passes any) at them.
    attn->add_forward_wrapper([rows](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
      std::vector<int64_t> pos = *rows;
      if (in[1].defined()) {
        const std::vector<int64_t> all = to_vector_i64(in[1]);
        for (auto& p : pos) p = all.at(size_t(p));
      }
      return fn({in[0], index_tensor(pos)});
    });
  }
  return partial;
}

}  // namespace loom::parallel
