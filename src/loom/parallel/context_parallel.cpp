#include "loom/parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/node.h"
#include "loom/backend/backend.h"
#include "loom/nn/layers.h"
#include "loom/ops/ops.h"

namespace loom::parallel {

Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         const GroupPtr& group, int64_t window) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
      << "ulysses_attention: expected (B, H, T/P, D) tensors, got " << q.shape() << ", "
      << k.shape() << ", " << v.shape();
  const int64_t P = group->size();
  LOOM_CHECK(q.size(1) % P == 0 && k.size(1) % P == 0)
      << "ulysses_attention: " << q.size(1) << " query and " << k.size(1) << " key/value heads "
      << "do not split over the " << P << " ranks of " << group->describe();
  // Heads scattered, sequence gathered: (B, H/P, T, D) in sequence order (rank j sent chunk j).
  auto to_heads = [&](const Tensor& x) { return all_to_all_along(x, 1, 2, group); };
  Tensor out = scaled_dot_product_attention(to_heads(q), to_heads(k), to_heads(v), Tensor(), causal,
                                            -1.0f, window);
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

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Every attention module of the plan, whatever its kind (their cores are set alike).
std::vector<std::string> attention_modules(const nn::ParallelPlan& plan) {
  std::vector<std::string> paths = plan.attention;
  paths.insert(paths.end(), plan.latent_attention.begin(), plan.latent_attention.end());
  return paths;
}

// A run of rows holding consecutive positions: rows [row, row + length) hold positions
// [pos, pos + length).
struct Run {
  int64_t row, length, pos;
};

std::vector<Run> position_runs(const std::vector<int64_t>& pos) {
  std::vector<Run> runs;
  for (int64_t i = 0; i < int64_t(pos.size()); ++i) {
    if (!runs.empty() && runs.back().pos + runs.back().length == pos[size_t(i)])
      ++runs.back().length;
    else
      runs.push_back({i, 1, pos[size_t(i)]});
  }
  return runs;
}

// Which keys of a key run the queries of a query run see: the causal band (with the window)
// placed by their positions, query row i at key row i + q.pos - k.pos. A band every query sees
// whole is plain attention (a key run wholly before the queries, no window in the way); the
// same run is the kernel's usual causal diagonal. Empty: nullopt (a key run after the queries,
// or wholly before their windows).
std::optional<AttentionBand> visible_band(const Run& q, const Run& k, bool causal, int64_t window) {
  if (!causal) return AttentionBand{};
  const AttentionBand band{true, window, q.pos - k.pos};
  if (band.first(q.length - 1, k.length) == 0 && band.end(0, k.length) == k.length)
    return AttentionBand{};
  // Rows with keys: those past the key run's start (end > 0) whose window has not left it
  // (first < k.length).
  const int64_t lo = std::max<int64_t>(0, -band.offset);
  const int64_t hi =
      window > 0 ? std::min(q.length, k.length + window - 1 - band.offset) : q.length;
  if (lo >= hi) return std::nullopt;
  return band;
}

// Rows [r.row, r.row + r.length) of (B, H, n, D) or (B, H, n), contiguous.
Tensor rows(const Tensor& x, const Run& r) {
  return contiguous(narrow(x, 2, r.row, r.length));
}

// dst rows [row, row + len) += part; dst (B, H, n, D) f32 and part (B, H, len, D), widened
// from bf16 if need be. Through ops, so on the tensors' device.
void add_rows(const Tensor& dst, int64_t row, const Tensor& part) {
  const Tensor rows_of_dst = narrow(dst, 2, row, part.size(2));
  copy_(rows_of_dst, add(contiguous(rows_of_dst), to_dtype(part, DType::F32)));
}

// Every (query run, key run) pair of one ring step that sees anything, with its band.
template <typename F>
void for_each_pair(const std::vector<Run>& qruns, const std::vector<Run>& kruns, bool causal,
                   int64_t window, F f) {
  for (const Run& qr : qruns)
    for (const Run& kr : kruns)
      if (const auto band = visible_band(qr, kr, causal, window)) f(qr, kr, *band);
}

// Merges a partial result (attention of rows qr to one key run: o (B, H, len, D), lse (B, H,
// len)) into the running output and log-sum-exp of all rows: out = sum_i w_i o_i / sum_i w_i
// with w_i = exp(lse_i), kept normalised. The running lse starts at -inf, where its weight is
// 0; a part's row that sees no key (outside a sliding window) has lse -inf and weight 0 too.
// The shift m is at least -1e30 and the total at least 1e-30, so a row that has seen no key
// yet stays out 0 (its lse then -1e30 - 69, still weight 0 later) instead of 0/0; for every
// other row the total is >= 1 and the floors change no bit. Through ops, so on the tensors'
// device.
void merge(const Tensor& out, const Tensor& lse, const Run& qr, const Tensor& part,
           const Tensor& l) {
  const Tensor o = to_dtype(part, DType::F32);                // a bf16 kernel's output, widened
  const Tensor out_rows = narrow(out, 2, qr.row, qr.length);  // (B, H, len, D)
  const Tensor lse_rows = narrow(lse, 2, qr.row, qr.length);  // (B, H, len)
  const Tensor old_lse = contiguous(lse_rows);
  const Tensor floor = full(l.shape(), -1e30, DType::F32, l.device());
  const Tensor m = max(stack({old_lse, l, floor}, -1), {-1});
  const Tensor w_old = exp(sub(old_lse, m)), w_add = exp(sub(l, m)),
               total = add_scalar(add(w_old, w_add), 1e-30);
  auto per_row = [](const Tensor& w) { return unsqueeze(w, -1); };  // (B, H, len, 1)
  copy_(out_rows, div(add(mul(contiguous(out_rows), per_row(w_old)), mul(o, per_row(w_add))),
                      per_row(total)));
  copy_(lse_rows, add(m, log(total)));
}

// A key/value block and its positions on their way to the next rank of the ring.
struct BlockShift {
  RingShift k, v, positions;
  BlockShift(const Tensor& kb, const Tensor& vb, const Tensor& pb, const GroupPtr& group)
      : k(kb, 1, group), v(vb, 1, group), positions(pb, 1, group) {}
  void finish(Tensor& kb, Tensor& vb, Tensor& pb) {
    kb = k.finish();
    vb = v.finish();
    pb = positions.finish();
  }
};

struct RingAttentionBackward : Node {
  // This rank's rows (q, k, v in the kernels' dtype); out (f32) and lse over every rank's keys.
  Tensor q, k, v, out, lse, positions;
  bool causal = false;
  int64_t window = 0;
  float scale = 1.0f;
  GroupPtr group;
  const char* name() const override { return "RingAttentionBackward"; }

  // The key/value blocks go around the ring again, each with the gradients accumulated for it
  // so far; after the last step one more shift brings each block's gradients home. Per block
  // the fused kernel's backward with the final out and lse gives that block's exact share.
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    NoGradGuard no_grad;
    // The kernels take the output and its gradient in their dtype (bf16 under autocast).
    const DType kernel = q.dtype();
    const Tensor gout = contiguous(to_dtype(g[0], kernel)), out_k = to_dtype(out, kernel);
    const std::vector<Run> qruns = position_runs(to_vector_i64(positions));
    const Device device = q.device();
    Tensor gq = zeros(q.shape(), DType::F32, device), kb = k, vb = v, pb = positions;
    Tensor gk = zeros(k.shape(), DType::F32, device), gv = zeros(v.shape(), DType::F32, device);
    const int64_t P = group->size();
    for (int64_t step = 0; step < P; ++step) {
      // The block moves on while its gradients are computed; they follow it afterwards.
      std::unique_ptr<BlockShift> next;
      if (step + 1 < P) next = std::make_unique<BlockShift>(kb, vb, pb, group);
      for_each_pair(qruns, position_runs(to_vector_i64(pb)), causal, window,
                    [&](const Run& qr, const Run& kr, const AttentionBand& band) {
                      Tensor gq_part = Tensor::empty({q.size(0), q.size(1), qr.length, q.size(3)},
                                                     kernel, device);
                      Tensor gk_part = Tensor::empty({k.size(0), k.size(1), kr.length, k.size(3)},
                                                     kernel, device);
                      Tensor gv_part = Tensor::empty(gk_part.shape(), kernel, device);
                      backend_for(q.device())
                          .attention_backward(rows(q, qr), rows(kb, kr), rows(vb, kr), Tensor(),
                                              scale, band, rows(out_k, qr), rows(lse, qr),
                                              rows(gout, qr), gq_part, gk_part, gv_part);
                      add_rows(gq, qr.row, gq_part);
                      add_rows(gk, kr.row, gk_part);
                      add_rows(gv, kr.row, gv_part);
                    });
      if (step + 1 < P) {
        RingShift sgk(gk, 1, group), sgv(gv, 1, group);
        gk = sgk.finish();
        gv = sgv.finish();
        next->finish(kb, vb, pb);
      }
    }
    RingShift home_k(gk, 1, group), home_v(gv, 1, group);
    Tensor gk_home = home_k.finish(), gv_home = home_v.finish();
    return {gq, gk_home, gv_home};
  }
  void release() override { q = k = v = out = lse = positions = Tensor(); }
};

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                      bool causal, const GroupPtr& group, int64_t window) {
  LOOM_CHECK(window >= 0 && (window == 0 || causal))
      << "ring_attention: a sliding window (" << window << ") needs causal attention";
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) % k.size(1) == 0 &&
             positions.numel() == q.size(2) && k.size(2) == q.size(2) && k.shape() == v.shape())
      << "ring_attention: expected q (B, H, n, D), k/v (B, Hkv, n, D) and n positions, got "
      << q.shape() << ", " << k.shape() << ", " << v.shape() << ", " << positions.shape();
  LOOM_CHECK(q.dtype() == DType::F32 && k.dtype() == DType::F32 && v.dtype() == DType::F32)
      << "ring_attention: f32 inputs only, got " << dtype_name(q.dtype());
  const int64_t P = group->size(), B = q.size(0), H = q.size(1), n = q.size(2), D = q.size(3);
  const float scale = 1.0f / std::sqrt(float(D));
  // Under bf16 autocast the blocks travel, and the kernels run, in bf16.
  const DType kernel = autocast_dtype() == DType::BF16 ? DType::BF16 : DType::F32;
  Tensor qc, kc, vc, pc, out, lse;
  {
    NoGradGuard no_grad;
    qc = contiguous(to_dtype(q, kernel)).detach();
    kc = contiguous(to_dtype(k, kernel)).detach();
    vc = contiguous(to_dtype(v, kernel)).detach();
    pc = contiguous(positions).detach();
  }
  // Selective checkpointing keeps the result instead of running the ring again.
  const std::vector<Tensor> result = computed_or_kept([&] {
    NoGradGuard no_grad;
    const Device device = q.device();
    Tensor out = zeros({B, H, n, D}, DType::F32, device);
    Tensor lse = full({B, H, n}, double(kNegInf), DType::F32, device);
    const std::vector<Run> qruns = position_runs(to_vector_i64(pc));
    Tensor kb = kc, vb = vc, pb = pc;
    for (int64_t step = 0; step < P; ++step) {
      // The next block starts moving while this one is used.
      std::unique_ptr<BlockShift> next;
      if (step + 1 < P) next = std::make_unique<BlockShift>(kb, vb, pb, group);
      for_each_pair(qruns, position_runs(to_vector_i64(pb)), causal, window,
                    [&](const Run& qr, const Run& kr, const AttentionBand& band) {
                      Tensor o = Tensor::empty({B, H, qr.length, D}, kernel, device),
                             l = Tensor::empty({B, H, qr.length}, DType::F32, device);
                      backend_for(q.device())
                          .attention_forward(rows(qc, qr), rows(kb, kr), rows(vb, kr), Tensor(),
                                             scale, band, o, l);
                      merge(out, lse, qr, o, l);
                    });
      if (next) next->finish(kb, vb, pb);
    }
    return std::vector<Tensor>{out, lse};
  });
  out = result[0];
  lse = result[1];
  if (any_requires_grad({q, k, v})) {
    auto node = std::make_shared<RingAttentionBackward>();
    node->q = qc;
    node->k = kc;
    node->v = vc;
    node->out = out;
    node->lse = lse;
    node->positions = pc;
    node->causal = causal;
    node->window = window;
    node->scale = scale;
    node->group = group;
    Tensor result = out.detach();
    record(node, {q, k, v}, {result});
    return result;
  }
  return out;
}

Tensor usp_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                     bool causal, const GroupPtr& ulysses, const GroupPtr& ring, int64_t window) {
  const int64_t U = ulysses->size(), n = q.size(2);
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && positions.numel() == n)
      << "usp_attention: expected q (B, H, n, D), k/v (B, Hkv, n, D) and n positions, got "
      << q.shape() << ", " << k.shape() << ", " << v.shape() << ", " << positions.shape();
  LOOM_CHECK(q.size(1) % U == 0 && k.size(1) % U == 0)
      << "usp_attention: " << q.size(1) << " query and " << k.size(1) << " key/value heads "
      << "do not split over the " << U << " Ulysses ranks of " << ulysses->describe();
  // The ring member's positions: every Ulysses rank's, in rank order, as its rows arrive. They
  // travel as the rows do (an all-to-all on the tensors' device), as f32: exact below 2^24.
  Tensor ring_positions;
  {
    NoGradGuard no_grad;
    const std::vector<int64_t> mine = to_vector_i64(positions);
    std::vector<float> sent;
    for (int64_t j = 0; j < U; ++j)
      for (int64_t p : mine) {
        LOOM_CHECK(p >= 0 && p < (int64_t(1) << 24))
            << "usp_attention: position " << p << " is beyond the 2^24 it carries exactly";
        sent.push_back(float(p));
      }
    const Tensor got =
        all_to_all_along(from_vector(sent, {1, U, n, 1}, DType::F32, q.device()), 1, 2, ulysses);
    std::vector<int64_t> all;
    for (float p : to_vector(got)) all.push_back(int64_t(p));
    ring_positions = from_vector(all, {U * n});
  }
  // Heads scattered, sequence gathered within the Ulysses group: (B, H/U, U n, D).
  auto to_heads = [&](const Tensor& x) { return all_to_all_along(x, 1, 2, ulysses); };
  const Tensor out =
      ring_attention(to_heads(q), to_heads(k), to_heads(v), ring_positions, causal, ring, window);
  return all_to_all_along(out, 2, 1, ulysses);  // back to (B, H, n, D)
}

std::vector<int64_t> context_parallel_rows(int64_t T, int64_t rank, int64_t P,
                                           ContextParallelKind kind, int64_t ulysses) {
  if (kind == ContextParallelKind::Ring) return load_balanced_positions(T, rank, P);
  if (kind == ContextParallelKind::Usp) {
    LOOM_CHECK(ulysses > 0 && P % ulysses == 0)
        << "USP: " << ulysses << " Ulysses ranks do not divide the " << P
        << " context-parallel ranks";
    const int64_t R = P / ulysses;
    const std::vector<int64_t> member = load_balanced_positions(T, rank / ulysses, R);
    const int64_t m = int64_t(member.size());
    LOOM_CHECK(m % ulysses == 0) << "USP: a ring member's " << m << " rows of " << T
                                 << " do not split over " << ulysses << " Ulysses ranks";
    const int64_t part = m / ulysses, u = rank % ulysses;
    return {member.begin() + u * part, member.begin() + (u + 1) * part};
  }
  LOOM_CHECK(T % P == 0) << "context parallel: " << T << " positions do not split over " << P
                         << " ranks";
  std::vector<int64_t> out;
  for (int64_t i = rank * (T / P); i < (rank + 1) * (T / P); ++i) out.push_back(i);
  return out;
}

std::vector<int64_t> segment_rows(const std::vector<int64_t>& segments, int64_t n, int64_t rank,
                                  int64_t P) {
  int64_t whole = 0;
  for (int64_t length : segments) whole += length;
  std::vector<int64_t> rows;
  int64_t start = 0;
  for (int64_t length : segments) {
    LOOM_CHECK(length * n % whole == 0 && length * n / whole % P == 0)
        << "segmented sequence: a part of " << length << " of " << whole << " rows, as a share of "
        << n << " rows, does not split over " << P << " ranks";
    const int64_t part = length * n / whole, chunk = part / P;
    for (int64_t i = rank * chunk; i < (rank + 1) * chunk; ++i) rows.push_back(start + i);
    start += part;
  }
  return rows;
}

std::vector<int64_t> segment_order(const std::vector<int64_t>& segments, int64_t n, int64_t P) {
  std::vector<int64_t> order;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t i : segment_rows(segments, n, r, P)) order.push_back(i);
  return order;
}

std::vector<int64_t> inverse_order(const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t j = 0; j < order.size(); ++j) inverse[size_t(order[j])] = int64_t(j);
  return inverse;
}

namespace {

// The rows rank r holds of a stream of T rows: of a segmented one (plan.sequence_segments),
// chunk r of each segment in turn; else context_parallel_rows.
std::vector<int64_t> rank_rows(int64_t T, const std::vector<int64_t>& segments, int64_t rank,
                               int64_t P, ContextParallelKind kind, int64_t ulysses) {
  return segments.empty() ? context_parallel_rows(T, rank, P, kind, ulysses)
                          : segment_rows(segments, T, rank, P);
}

// Every rank's rows one after another (ring, segments: a permutation of 0..T-1).
std::vector<int64_t> rank_order(int64_t T, const std::vector<int64_t>& segments, int64_t P,
                                ContextParallelKind kind, int64_t ulysses) {
  std::vector<int64_t> order;
  for (int64_t q = 0; q < P; ++q)
    for (int64_t i : rank_rows(T, segments, q, P, kind, ulysses)) order.push_back(i);
  return order;
}

Tensor index_tensor(const std::vector<int64_t>& index) {
  return from_vector(index, {int64_t(index.size())});
}

}  // namespace

std::set<std::string> apply_context_parallel(nn::Module& model, const nn::ParallelPlan& plan,
                                             const GroupPtr& group, ContextParallelKind kind,
                                             int64_t ulysses) {
  LOOM_CHECK(!plan.blocks.empty()) << "context parallel: the model names no blocks";
  const bool ring = kind == ContextParallelKind::Ring, usp = kind == ContextParallelKind::Usp;
  const int64_t P = group->size(), rank = group->rank(), dim = plan.sequence_dim;
  const std::vector<int64_t>& segments = plan.sequence_segments;
  if (!usp) ulysses = 1;
  LOOM_CHECK(!usp || (ulysses > 1 && ulysses < P && P % ulysses == 0))
      << "context parallel: USP's " << ulysses << " Ulysses ranks must divide the " << P
      << " context-parallel ranks and leave a ring of at least 2";
  // USP: the Ulysses groups are consecutive ranks (rank a U + u: ring member a), the rings the
  // ranks of one Ulysses index.
  GroupPtr ulysses_group, ring_group;
  if (usp) {
    ulysses_group = group->split(int(rank / ulysses), int(rank % ulysses), "cp_ulysses");
    ring_group = group->split(int(rank % ulysses), int(rank / ulysses), "cp_ring");
  }
  for (const auto& path : attention_modules(plan)) {
    auto* attn = dynamic_cast<nn::AttentionModule*>(&model.submodule(path));
    LOOM_CHECK(attn) << "context parallel: " << path << " is not an attention module";
    if (usp)
      attn->core = [ulysses_group, ring_group, rank](const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& pos,
                                                     bool causal, int64_t window) {
        if (pos.defined())
          return usp_attention(q, k, v, pos, causal, ulysses_group, ring_group, window);
        // Position-free and bidirectional: rank r's rows as the r-th run (a Ulysses group's
        // runs then make one longer run).
        LOOM_CHECK(!causal) << "context parallel: causal attention needs its rows' positions";
        std::vector<int64_t> rows(size_t(q.size(2)));
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = rank * q.size(2) + int64_t(i);
        return usp_attention(q, k, v, from_vector(rows, {q.size(2)}), false, ulysses_group,
                             ring_group);
      };
    else if (ring)
      attn->core = [group, rank](const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& pos, bool causal, int64_t window) {
        if (pos.defined()) return ring_attention(q, k, v, pos, causal, group, window);
        // Without positions (a segmented stream, position-free and bidirectional) any
        // partition of the rows will do: rank r's as the r-th run.
        LOOM_CHECK(!causal) << "context parallel: causal attention needs its rows' positions";
        std::vector<int64_t> rows(size_t(q.size(2)));
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = rank * q.size(2) + int64_t(i);
        return ring_attention(q, k, v, from_vector(rows, {q.size(2)}), false, group);
      };
    else
      attn->core = [group](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&,
                           bool causal, int64_t window) {
        return ulysses_attention(q, k, v, causal, group, window);
      };
  }
  std::set<std::string> partial;
  if (plan.sequence_shards) {
    // The rows come with their positions; the loss is each rank's mean over its rows' targets
    // (those not ignored, -100): weighted by its share of all ranks' targets and summed, it is
    // the mean over the whole sequence, the same on every rank.
    LOOM_CHECK(!plan.loss.empty()) << "context parallel: sequence shards need the plan's loss";
    model.submodule(plan.loss).add_forward_wrapper([group](const nn::Module::ForwardFn& fn,
                                                           const std::vector<Tensor>& in) {
      const std::vector<int64_t> targets = to_vector_i64(in[1]);
      const float valid =
          float(std::count_if(targets.begin(), targets.end(), [](int64_t t) { return t != -100; }));
      Tensor total = from_vector(std::vector<float>{valid}, {1});
      group->all_reduce(total, dist::ReduceOp::Sum)->wait();
      const double all = double(total.data<float>()[0]);
      const Tensor mean = fn(in);  // always: it may hold collectives (vocabulary split)
      const Tensor share = valid > 0 ? mul_scalar(mean, double(valid) / all)
                                     : mul_scalar(sum(in[0]), 0.0);  // no targets here
      return reduce_from_group(share, group);
    });
    for (const auto& p : model.named_parameters()) partial.insert(p.name);
    return partial;
  }
  // Inputs from the other segment's rows (cross-attention's keys and values): gathered whole.
  for (const auto& path : plan.context_inputs)
    model.submodule(path).add_forward_wrapper(
        [group, dim](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
          std::vector<Tensor> args = in;
          args[0] = all_gather_along(args[0], dim, group);
          return fn(args);
        });
  // Rows in another order than rank-contiguous chunks: every rank's one after another.
  const bool permuted = ring || usp || !segments.empty();
  // This rank's rows of the current forward: set where the region starts, read by attention.
  auto rows = std::make_shared<std::vector<int64_t>>();
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    const bool first = plan.stretch_starts_at(i);
    const bool last = i + 1 == plan.blocks.size() || plan.stretch_starts_at(i + 1);
    model.submodule(plan.blocks[i])
        .add_forward_wrapper([=](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
          std::vector<Tensor> args = in;
          if (first) {
            const int64_t T = args[0].size(dim);
            *rows = rank_rows(T, segments, rank, P, kind, ulysses);
            // Ring, segments: put every rank's rows one after another, so that a plain split
            // hands each its own (ring: its load-balanced chunks).
            const Tensor x =
                permuted ? index_select(args[0], dim,
                                        index_tensor(rank_order(T, segments, P, kind, ulysses)))
                         : args[0];
            args[0] = scatter_along(x, dim, group);
          }
          for (size_t k = 1; k < args.size(); ++k)  // whole conditioning used on a share of rows
            if (args[k].defined() && args[k].requires_grad())
              args[k] = copy_to_group(args[k], group);
          Tensor out = fn(args);
          if (!last) return out;
          out = gather_along(out, dim, group);
          if (!permuted) return out;
          return index_select(
              out, dim,
              index_tensor(inverse_order(rank_order(out.size(dim), segments, P, kind, ulysses))));
        });
    for (const auto& p : model.submodule(plan.blocks[i]).named_parameters())
      partial.insert(plan.blocks[i] + "." + p.name);
  }
  if (!segments.empty()) return partial;  // position-free: the attention needs no positions
  for (const auto& path : attention_modules(plan)) {
    auto* attn = dynamic_cast<nn::AttentionModule*>(&model.submodule(path));
    // The positions of this rank's rows: the model's positions (if it passes any) at them.
    attn->add_forward_wrapper(
        [rows](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
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
