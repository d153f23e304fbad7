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

// An uninitialised (B, H, S, D) tensor of `dtype`, stored as (B, S, H, D) when `like` is
// (heads interleaved within each position, as q/k/v sliced from one projection are), so the
// permute and reshape backwards towards that projection stay views.
Tensor empty_heads_like(const Tensor& like, DType dtype) {
  const int64_t B = like.size(0), H = like.size(1), S = like.size(2), D = like.size(3);
  if (H > 1 && S > 1 && like.stride(1) < like.stride(2)) {
    Tensor bshd = Tensor::empty({B, S, H, D}, dtype, like.device());
    return bshd.as_strided({B, H, S, D}, {S * H * D, D, H * D, 1}, 0);
  }
  return Tensor::empty(like.shape(), dtype, like.device());
}

// `t` converted to `dtype` in the same layout (a kernel operand: no graph edge).
Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = empty_heads_like(t, dtype);
  backend_of(t).copy(t, out);
  return out;
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

// The q, k, v (B, H, S, D) heads of a (B, S, W) projection block, as one_projection sees them.
struct Heads {
  Tensor q, k, v;
};
Heads heads_of_block(const Tensor& block, int64_t hq, int64_t hkv, int64_t d) {
  const int64_t B = block.size(0), S = block.size(1), W = block.size(2), at = block.offset();
  auto part = [&](int64_t heads, int64_t column) {
    return block.as_strided({B, heads, S, d}, {S * W, d, W, 1}, at + column);
  };
  return {part(hq, 0), part(hkv, hq * d), part(hkv, (hq + hkv) * d)};
}

// q, k, v (one_projection) as the (B, S, W) block they are columns of.
Tensor block_of(const Tensor& q, const Tensor& k) {
  const int64_t B = q.size(0), S = q.size(2), W = (q.size(1) + 2 * k.size(1)) * q.size(3);
  return q.as_strided({B, S, W}, {S * W, W, 1}, q.offset());
}

// The bf16 kernel operands under autocast: one copy of the projection block when q, k, v are
// its columns, so the gradients come back as one block too (see the backward).
Heads bf16_operands(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!one_projection(q, k, v))
    return {converted(q, DType::BF16), converted(k, DType::BF16), converted(v, DType::BF16)};
  const Tensor block = block_of(q, k);
  Tensor narrow = Tensor::empty(block.shape(), DType::BF16, q.device());
  backend_of(q).copy(block, narrow);
  return heads_of_block(narrow, q.size(1), k.size(1), q.size(3));
}

struct AttentionBackward : Node {
  Tensor q, k, v, mask, out, lse;  // what the kernel saw: bf16 copies under autocast
  float scale;
  AttentionBand band;
  bool mixed = false;  // autocast: the op's inputs, output and gradients are f32
  const char* name() const override { return "AttentionBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const DType dtype = q.dtype();
    const Tensor gout = mixed ? converted(g[0], dtype) : rows_contiguous(g[0]);
    if (one_projection(q, k, v)) {
      // The gradients in the projection output's layout, one buffer: the split's backward then
      // takes it whole instead of copying three parts into place.
      const Tensor block = block_of(q, k);
      const Tensor joined = Tensor::empty(block.shape(), dtype, q.device());
      const Heads grad = heads_of_block(joined, q.size(1), k.size(1), q.size(3));
      backend_of(q).attention_backward(q, k, v, mask, scale, band, out, lse, gout, grad.q, grad.k,
                                       grad.v);
      if (!mixed) return {grad.q, grad.k, grad.v, Tensor()};
      Tensor wide = Tensor::empty(joined.shape(), DType::F32, q.device());
      backend_of(q).copy(joined, wide);
      const Heads w = heads_of_block(wide, q.size(1), k.size(1), q.size(3));
      return {w.q, w.k, w.v, Tensor()};
    }
    const Tensor gq = empty_heads_like(q, dtype), gk = empty_heads_like(k, dtype),
                 gv = empty_heads_like(v, dtype);
    backend_of(q).attention_backward(q, k, v, mask, scale, band, out, lse, gout, gq, gk, gv);
    if (!mixed) return {gq, gk, gv, Tensor()};
    return {converted(gq, DType::F32), converted(gk, DType::F32), converted(gv, DType::F32),
            Tensor()};
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
                                    const Tensor& mask, bool causal, float scale, int64_t window) {
  const char* op = "attention";
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
  LOOM_CHECK(window >= 0 && (window == 0 || causal))
      << "attention: a sliding window (" << window << ") needs causal attention with a positive "
      << "window";
  const AttentionBand band = AttentionBand::last_rows(causal, q.size(2), k.size(2), window);
  if (scale <= 0) scale = 1.0f / std::sqrt(float(q.size(3)));
  // Mixed precision: the kernel runs on bf16 copies of q, k, v (it accumulates in f32 and keeps
  // its softmax statistics in f32); the output and the gradients come back as f32.
  const bool mixed = autocast_dtype() == DType::BF16 && q.dtype() == DType::F32;
  const Heads in = mixed ? bf16_operands(q, k, v)
                         : Heads{rows_contiguous(q), rows_contiguous(k), rows_contiguous(v)};
  Tensor m = mask.defined() ? broadcast_mask(mask, {q.size(0), q.size(1), q.size(2), k.size(2)})
                            : Tensor();
  // The output always as (B, S, H, D) memory: attention is followed by merging the heads.
  // S is the query length (k and v have k.size(2) rows), D the head dim.
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  const auto computed = computed_or_kept([&] {
    Tensor out = Tensor::empty({B, S, H, D}, in.q.dtype(), q.device())
                     .as_strided({B, H, S, D}, {S * H * D, D, H * D, 1}, 0);
    Tensor lse = Tensor::empty({B, H, S}, DType::F32, q.device());  // log-sum-exp per query row
    backend_of(q).attention_forward(in.q, in.k, in.v, m, scale, band, out, lse);
    return std::vector<Tensor>{out, lse};
  });
  const Tensor& kernel_out = computed[0];
  const Tensor out = mixed ? converted(kernel_out, DType::F32) : kernel_out;
  if (any_requires_grad({q, k, v})) {
    auto node = std::make_shared<AttentionBackward>();
    node->q = in.q.detach();
    node->k = in.k.detach();
    node->v = in.v.detach();
    node->mask = m.defined() ? m.detach() : Tensor();
    node->out = kernel_out.detach();
    node->lse = computed[1];
    node->scale = scale;
    node->band = band;
    node->mixed = mixed;
    record(node, {q, k, v, mask}, {out});
  }
  return out;
}

}  // namespace loom
