#include "loom/nn/mla.h"

#include <algorithm>
#include <cmath>

#include "loom/ops/ops.h"

namespace loom::nn {

void MlaConfig::validate() const {
  LOOM_CHECK(dim > 0 && heads > 0 && kv_rank > 0 && q_rank >= 0 && nope_dim > 0 && rope_dim > 0 &&
             v_dim > 0 && window >= 0)
      << "mla: dim " << dim << ", heads " << heads << ", mla_kv_rank " << kv_rank
      << " and the head's nope " << nope_dim << ", rope " << rope_dim << " and value " << v_dim
      << " dims must be positive, mla_q_rank " << q_rank << " and the window " << window << " >= 0";
  LOOM_CHECK(rope_dim % 2 == 0) << "mla: mla_rope_dim " << rope_dim
                                << " must be even (RoPE rotates pairs)";
}

LatentAttention::LatentAttention(const MlaConfig& c) : config(c), heads(c.heads) {
  config.validate();
  const int64_t H = c.heads, qk = c.nope_dim + c.rope_dim;
  if (c.q_rank == 0) {
    q_proj = register_module("q_proj", std::make_shared<Linear>(c.dim, H * qk, false, c.init));
  } else {
    q_down = register_module("q_down", std::make_shared<Linear>(c.dim, c.q_rank, false, c.init));
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(c.q_rank, c.norm_eps));
    q_up = register_module("q_up", std::make_shared<Linear>(c.q_rank, H * qk, false, c.init));
  }
  kv_down = register_module("kv_down",
                            std::make_shared<Linear>(c.dim, c.kv_rank + c.rope_dim, false, c.init));
  kv_norm = register_module("kv_norm", std::make_shared<RMSNorm>(c.kv_rank, c.norm_eps));
  kv_up = register_module(
      "kv_up", std::make_shared<Linear>(c.kv_rank, H * (c.nope_dim + c.v_dim), false, c.init));
  proj = register_module("proj", std::make_shared<Linear>(H * c.v_dim, c.dim, false, c.init));
}

LatentAttention::Projected LatentAttention::project(const Tensor& x,
                                                    const Tensor& positions) const {
  const MlaConfig& c = config;
  const int64_t B = x.size(0), T = x.size(1), H = heads;
  LOOM_CHECK(positions.defined()) << "mla: RoPE needs token positions";
  const Tensor q_out = q_proj ? q_proj->forward(x)  // (B, T, H (nope + rope))
                              : q_up->forward(q_norm->forward(q_down->forward(x)));
  const Tensor q = permute(reshape(q_out, {B, T, H, c.nope_dim + c.rope_dim}), {0, 2, 1, 3});
  Projected p;
  p.q_nope = narrow(q, 3, 0, c.nope_dim);
  p.q_rope = rope(narrow(q, 3, c.nope_dim, c.rope_dim), positions, c.rope_theta, c.rope_scaling);
  const Tensor kv = kv_down->forward(x);  // (B, T, kv_rank + rope)
  p.latent = kv_norm->forward(narrow(kv, 2, 0, c.kv_rank));
  const Tensor k_rope = unsqueeze(narrow(kv, 2, c.kv_rank, c.rope_dim), 1);  // (B, 1, T, rope)
  p.k_rope = rope(k_rope, positions, c.rope_theta, c.rope_scaling);
  return p;
}

Tensor LatentAttention::forward(const Tensor& x, const Tensor& positions) const {
  return call({x, positions},
              [this](const std::vector<Tensor>& in) { return attend(in[0], in[1]); });
}

// Training: the latent up-projected to every head's keys and values, then ordinary attention.
// The fused kernels take q, k and v of one head dim D = max(nope + rope, v_dim): the narrower
// side is padded with zeros (which adds nothing to a score or an output), and q is scaled so
// that the kernels' 1/sqrt(D) makes MLA's 1/sqrt(nope + rope).
Tensor LatentAttention::attend(const Tensor& x, const Tensor& positions) const {
  const MlaConfig& c = config;
  const Projected p = project(x, positions);
  const int64_t B = x.size(0), T = x.size(1), H = heads, qk = c.nope_dim + c.rope_dim;
  const Tensor kv = permute(reshape(kv_up->forward(p.latent), {B, T, H, c.nope_dim + c.v_dim}),
                            {0, 2, 1, 3});  // (B, H, T, nope + v)
  Tensor q = cat({p.q_nope, p.q_rope}, 3);
  Tensor k = cat({narrow(kv, 3, 0, c.nope_dim), expand(p.k_rope, {B, H, T, c.rope_dim})}, 3);
  Tensor v = narrow(kv, 3, c.nope_dim, c.v_dim);
  const int64_t D = std::max(qk, c.v_dim);
  auto padded = [&](const Tensor& t) {
    const int64_t have = t.size(3);
    return have == D ? t : cat({t, zeros({B, H, T, D - have}, t.dtype(), t.device())}, 3);
  };
  if (D != qk) q = mul_scalar(q, std::sqrt(double(D) / double(qk)));
  q = padded(q), k = padded(k), v = padded(v);
  Tensor o = core ? core(q, k, v, positions, true, c.window)
                  : scaled_dot_product_attention(q, k, v, Tensor(), true, -1.0f, c.window);
  if (D != c.v_dim) o = narrow(o, 3, 0, c.v_dim);
  return merge_heads(o);
}

Tensor LatentAttention::merge_heads(const Tensor& o) const {  // (B, H, T, v)
  const int64_t B = o.size(0), T = o.size(2);
  return proj->forward(reshape(permute(o, {0, 2, 1, 3}), {B, T, heads * config.v_dim}));
}

Tensor LatentAttention::forward_cached(const Tensor& x, KvCache& cache, int64_t capacity) const {
  NoGradGuard no_grad;
  LOOM_CHECK(!core) << "mla: incremental decoding runs on the whole model (no parallel "
                       "attention core)";
  const MlaConfig& c = config;
  const int64_t B = x.size(0), T = x.size(1), H = heads, at = cache.length;
  const int64_t R = c.kv_rank, width = c.kv_rank + c.rope_dim;
  if (!cache.k.defined()) {
    cache.k = zeros({B, 1, capacity, width}, DType::F32, x.device());
    cache.length = 0;
  }
  LOOM_CHECK(cache.k.size(0) == B && at + T <= cache.k.size(2))
      << "mla: " << T << " more rows of a batch of " << B << " do not fit a cache of "
      << cache.k.size(0) << " x " << cache.k.size(2) << " rows holding " << at;
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) pos[size_t(i)] = at + i;
  const Projected p = project(x, from_vector(pos, {T}));
  // The new rows' [c | k_rope] join the cache: one key/value head of kv_rank + rope values.
  copy_(narrow(cache.k, 2, at, T), cat({unsqueeze(p.latent, 1), p.k_rope}, 3));
  cache.length = at + T;
  // kv_up's rows per head are [k_nope (nope) | v (v_dim)] of the latent: W_UK and W_UV.
  const Tensor w = reshape(kv_up->weight, {H, c.nope_dim + c.v_dim, R});
  const Tensor w_uk = narrow(w, 1, 0, c.nope_dim), w_uv = narrow(w, 1, c.nope_dim, c.v_dim);
  // Each head's q_nope absorbed into the latent: (W_UK^T q_nope) per head, (B, H, T, R).
  auto per_head = [&](const Tensor& t) {  // (B, H, T, n) -> (H, B T, n)
    return reshape(permute(t, {1, 0, 2, 3}), {H, B * T, t.size(3)});
  };
  auto back = [&](const Tensor& t) {  // (H, B T, n) -> (B, H, T, n)
    return permute(reshape(t, {H, B, T, t.size(2)}), {1, 0, 2, 3});
  };
  const Tensor q_latent = back(matmul(per_head(p.q_nope), w_uk));
  const Tensor q = cat({q_latent, p.q_rope}, 3);  // (B, H, T, R + rope)
  const int64_t from = c.window > 0 ? std::max<int64_t>(0, at - c.window + 1) : 0;
  const Tensor keys = contiguous(narrow(cache.k, 2, from, at + T - from));  // (B, 1, L, R + rope)
  const float scale = float(1.0 / std::sqrt(double(c.nope_dim + c.rope_dim)));
  // The latents are the keys and (their first R values) the values: MQA over the latent.
  const Tensor o = scaled_dot_product_attention(q, keys, keys, Tensor(), true, scale, c.window);
  const Tensor o_latent = narrow(o, 3, 0, R);                                // (B, H, T, R)
  const Tensor v = back(matmul(per_head(o_latent), transpose(w_uv, 1, 2)));  // (B, H, T, v)
  return merge_heads(v);
}

}  // namespace loom::nn
