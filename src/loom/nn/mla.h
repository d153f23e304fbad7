// Multi-head latent attention (MLA, DeepSeek-V2, 2024), as plain single-device code. Keys and
// values come from one small latent per token: c = RMSNorm(kv_down x) (kv_rank values), each
// head's k_nope and v up-projected from c (kv_up); RoPE acts on a separate part, each head's
// q_rope and one k_rope per token shared by every head (decoupled RoPE, so the latent itself
// carries no position). Queries come from x directly, or through a latent of their own
// (q_rank > 0: q_up(RMSNorm(q_down x))). A head's score is q_nope . k_nope + q_rope . k_rope,
// scaled by 1/sqrt(nope_dim + rope_dim).
//
// Decoding caches only [c | k_rope] per token -- kv_rank + rope_dim values, whatever the number
// of heads -- and never up-projects it: q_nope . (W_UK c) = (W_UK^T q_nope) . c, so each query
// head is absorbed into the latent space and attends to the cached latents as one shared
// key/value head (MQA over the latent), and W_UV is applied to the attended latent afterwards.
#pragma once
#include <memory>

#include "loom/nn/layers.h"

namespace loom::nn {

struct MlaConfig {
  int64_t dim = 0;
  int64_t heads = 1;
  int64_t kv_rank = 0;   // the latent c per token (DeepSeek's kv_lora_rank)
  int64_t q_rank = 0;    // 0: q = q_proj x; else q through a latent of this size (q_lora_rank)
  int64_t nope_dim = 0;  // per head, q's and k's part without RoPE (qk_nope_head_dim)
  int64_t rope_dim = 0;  // per head, q's rotated part; k's rotated part is shared by all heads
  int64_t v_dim = 0;     // per head, the values
  double rope_theta = 10000.0;
  RopeScaling rope_scaling{};
  int64_t window = 0;  // a sliding window (causal) of this many keys; 0: all
  float norm_eps = 1e-6f;
  Init init = Init::normal(0.02f);
  void validate() const;  // one clear error naming the field
};

class LatentAttention : public AttentionModule {
 public:
  explicit LatentAttention(const MlaConfig& config);
  // x (B, T, dim), positions (T) i64 -> (B, T, dim); causal. Through call(): parallelism wraps
  // it (tensor parallelism takes the whole input once; context parallelism passes its rows'
  // positions) and may set the attention core (AttentionModule).
  Tensor forward(const Tensor& x, const Tensor& positions) const;
  // Incremental decoding without a graph, the absorbed path: x (B, T, dim) the rows at
  // positions [cache.length, cache.length + T). cache.k holds [c | k_rope] as one key/value
  // head, (B, 1, capacity, kv_rank + rope_dim) (allocated here for `capacity` rows when
  // undefined); cache.v stays undefined. Over a sequence in pieces it equals forward.
  Tensor forward_cached(const Tensor& x, KvCache& cache, int64_t capacity) const;

  const MlaConfig config;
  // The heads this module computes: tensor parallelism lowers it to this rank's share (and
  // shards the per-head projections to match).
  int64_t heads;
  std::shared_ptr<Linear> q_proj;        // dim -> heads (nope + rope); q_rank == 0
  std::shared_ptr<Linear> q_down, q_up;  // dim -> q_rank -> heads (nope + rope)
  std::shared_ptr<RMSNorm> q_norm;       // (q_rank)
  std::shared_ptr<Linear> kv_down;       // dim -> kv_rank (c) + rope_dim (k_rope)
  std::shared_ptr<RMSNorm> kv_norm;      // (kv_rank)
  std::shared_ptr<Linear> kv_up;         // kv_rank -> heads (nope (k) + v_dim (v))
  std::shared_ptr<Linear> proj;          // heads v_dim -> dim

 private:
  struct Projected {
    Tensor q_nope, q_rope;  // (B, H, T, nope), (B, H, T, rope), rotated at the positions
    Tensor latent;          // (B, T, kv_rank), normalised
    Tensor k_rope;          // (B, 1, T, rope), rotated
  };
  Projected project(const Tensor& x, const Tensor& positions) const;
  Tensor attend(const Tensor& x, const Tensor& positions) const;
  Tensor merge_heads(const Tensor& o) const;  // (B, H, T, v_dim) -> proj -> (B, T, dim)
};

}  // namespace loom::nn
