#include "loom/ops/attention.h"

#include "loom/autograd/checkpoint.h"

#include <cmath>

#include "loom/ops/creation.h"
#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {

// The kernel reads (B, H, S, D) operands through their strides as long as each row of D values
// is contiguous and rows do not overlap; only other layouts are copied.
Tensor rows_contiguous(const Tensor& t) {
  const bool rows_ok =
      (t.size(3) == 1 || t.stride(3) == 1) && (t.size(2) == 1 || t.stride(2) >= t.size(3));
  return rows_ok ? t : detail::raw_contiguous(t);
}

// An uninitialised (B, H, S, D) gradient, stored as (B, S, H, D) when `like` is (heads
// interleaved within each position, as q/k/v sliced from one projection are), so the
// permute and reshape backwards towards that projection stay views.
Tensor empty_heads_like(const Tensor& like) {
  const int64_t B = like.size(0), H = like.size(1), S = like.size(2), D = like.size(3);
  if (H > 1 && S > 1 && like.stride(1) < like.stride(2)) {
    Tensor bshd = Tensor::empty({B, S, H, D}, like.dtype(), like.device());
    return bshd.as_strided({B, H, S, D}, {S * H * D, D, H * D, 1}, 0);
  }
  return detail::empty_like(like);
}

// Whether q, k and v are the [q | k | v] column blocks of one (B, S, W) projection output,
// heads interleaved within each position (W = (Hq + 2 Hkv) D).
bool one_projection(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t B = q.size(0), S = q.size(2), D = q.size(3), Hq = q.size(1), Hkv = k.size(1);
  const int64_t W = (Hq + 2 * Hkv) * D;
  auto sliced = [&](const Tensor& t, int64_t offset) {
    return t.storage() == q.storage() && t.offset() == offset && t.stride(0) == S * W &&
           t.stride(1) == D && t.stride(2) == W && t.stride(3) == 1;
  };
  return B > 0 && S > 1 && sliced(q, q.offset()) && sliced(k, q.offset() + Hq * D) &&
         sliced(v, q.offset() + (Hq + Hkv) * D);
}

struct AttentionBackward : Node {
  Tensor q, k, v, mask, out, lse;
  float scale;
  bool causal;
  const char* name() const override { return "AttentionBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gq, gk, gv;
    if (one_projection(q, k, v)) {
      // The gradients in the projection output's layout, one buffer: the split's backward then
      // takes it whole instead of copying three parts into place.
      const int64_t B = q.size(0), S = q.size(2), D = q.size(3), Hq = q.size(1), Hkv = k.size(1);
      const int64_t W = (Hq + 2 * Hkv) * D;
      const Tensor joined = Tensor::empty({B, S, W}, q.dtype(), q.device());
      auto part = [&](int64_t heads, int64_t at) {
        return joined.as_strided({B, heads, S, D}, {S * W, D, W, 1}, at);
      };
      gq = part(Hq, 0);        // (B, Hq, S, D)
      gk = part(Hkv, Hq * D);  // (B, Hkv, S, D), as gv
      gv = part(Hkv, (Hq + Hkv) * D);
    } else {
      gq = empty_heads_like(q);
      gk = empty_heads_like(k);
      gv = empty_heads_like(v);
    }
    backend_of(q).attention_backward(q, k, v, mask, scale, causal, out, lse, rows_contiguous(g[0]),
                                     gq, gk, gv);
    return {gq, gk, gv, Tensor()};
  }
  void release() override { q = k = v = mask = out = lse = Tensor(); }
};

// The mask as a 4-D view broadcast to (B, H, Sq, Skv) through zero strides.
Tensor broadcast_mask(const Tensor& mask, const Shape& target) {
  LOOM_CHECK(mask.dtype() == DType::F32)
      << "attention: mask must be f32 (additive), got " << dtype_name(mask.dtype());
  LOOM_CHECK(mask.dim() <= 4) << "attention: mask " << mask.shape() << " has more than 4 dims";
  const int64_t lead = 4 - mask.dim();
  Shape strides(4, 0);
  for (int64_t d = 0; d < mask.dim(); ++d) {
    const int64_t t = target[size_t(lead + d)];
    LOOM_CHECK(mask.size(d) == t || mask.size(d) == 1)
        << "attention: mask " << mask.shape() << " does not broadcast to " << target;
    strides[size_t(lead + d)] = mask.size(d) == 1 ? 0 : mask.stride(d);
  }
  return mask.as_strided(target, strides, mask.offset());
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool causal, float scale) {
  const char* op = "attention";
  if (autocast_dtype() == DType::BF16 && q.dtype() == DType::F32 && k.dtype() == DType::F32 &&
      v.dtype() == DType::F32) {
    // Mixed precision: attention on bf16 q, k, v (the kernel accumulates in f32 and keeps its
    // softmax statistics in f32); the output comes back as f32 like the inputs.
    return to_dtype(scaled_dot_product_attention(to_dtype(q, DType::BF16), to_dtype(k, DType::BF16),
                                                 to_dtype(v, DType::BF16), mask, causal, scale),
                    DType::F32);
  }
  detail::check_floating(op, q, "q");
  detail::check_floating(op, k, "k");
  detail::check_floating(op, v, "v");
  detail::check_same_dtype(op, q, k);
  detail::check_same_dtype(op, q, v);
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
      << "attention: expected q, k, v as (B, H, S, D), got " << q.shape() << ", " << k.shape()
      << ", " << v.shape();
  LOOM_CHECK(k.shape() == v.shape())
      << "attention: k " << k.shape() << " and v " << v.shape() << " differ";
  LOOM_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3))
      << "attention: q " << q.shape() << " and k " << k.shape() << " differ in batch or head dim";
  LOOM_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0)
      << "attention: " << q.size(1) << " query heads are not a multiple of " << k.size(1)
      << " key/value heads (q " << q.shape() << ", k " << k.shape() << ")";
  LOOM_CHECK(!causal || q.size(2) <= k.size(2)) << "attention: causal with more queries ("
                                                << q.size(2) << ") than keys (" << k.size(2) << ")";
  if (scale <= 0) scale = 1.0f / std::sqrt(float(q.size(3)));
  Tensor qc = rows_contiguous(q), kc = rows_contiguous(k), vc = rows_contiguous(v);
  Tensor m = mask.defined() ? broadcast_mask(mask, {q.size(0), q.size(1), q.size(2), k.size(2)})
                            : Tensor();
  // The output always as (B, S, H, D) memory: attention is followed by merging the heads.
  // S is the query length (k and v have k.size(2) rows), D the head dim.
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  const auto computed = computed_or_kept([&] {
    Tensor out = Tensor::empty({B, S, H, D}, q.dtype(), q.device())
                     .as_strided({B, H, S, D}, {S * H * D, D, H * D, 1}, 0);
    Tensor lse = Tensor::empty({B, H, S}, DType::F32, q.device());  // log-sum-exp per query row
    backend_of(q).attention_forward(qc, kc, vc, m, scale, causal, out, lse);
    return std::vector<Tensor>{out, lse};
  });
  const Tensor& out = computed[0];
  const Tensor& lse = computed[1];
  if (any_requires_grad({q, k, v})) {
    auto node = std::make_shared<AttentionBackward>();
    node->q = qc.detach();
    node->k = kc.detach();
    node->v = vc.detach();
    node->mask = m.defined() ? m.detach() : Tensor();
    node->out = out.detach();
    node->lse = lse;
    node->scale = scale;
    node->causal = causal;
    record(node, {q, k, v, mask}, {out});
  }
  return out;
}

}  // namespace loom
