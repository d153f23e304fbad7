// A decoder-only language model in two styles, as plain single-device code:
//   "gpt2":  learned position embedding, LayerNorm, GELU MLP, biases, tied output embedding;
//   "llama": RoPE (no position embedding), RMSNorm, SwiGLU MLP, GQA via kv_heads, no biases,
//            and (by convention, see GptConfig::llama) an untied output head.
// Blocks are pre-norm: x + mixer(norm1(x)), then x + mlp(norm2(x)); the mixer is attention or,
// in a hybrid (GptConfig::mixers), a Mamba-2 state-space layer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/nn/layers.h"
#include "loom/nn/mamba2.h"
#include "loom/nn/mla.h"
#include "loom/nn/moe.h"
#include "loom/nn/parallel_plan.h"

namespace loom::models {

// model.style: GPT-2's blocks (LayerNorm, GELU, learned positions) or Llama's (RMSNorm,
// SwiGLU, rotary positions).
enum class GptStyle { Gpt2, Llama };
// "gpt2" or "llama"; another name fails naming `what` and the known ones.
GptStyle gpt_style_from_name(const std::string& name, const std::string& what);
const char* name_of(GptStyle style);

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t context = 256;  // longest sequence (size of the learned position table for gpt2)
  int64_t width = 384;
  int64_t depth = 6;
  int64_t heads = 6;
  int64_t kv_heads = 0;    // 0: same as heads (MHA); fewer: grouped-query attention
  double mlp_ratio = 4.0;  // gpt2: MLP hidden = mlp_ratio * width
  GptStyle style = GptStyle::Gpt2;
  double rope_theta = 10000.0;  // llama only
  RopeScaling rope_scaling{};   // llama only: Llama 3.x's scaled frequencies (factor 1: none)
  bool qkv_bias = false;        // llama only: biases on the q, k, v projections (Qwen2's)
  // Sliding-window attention (Mistral's): each token attends to itself and the window - 1
  // tokens before it, in every attention block; 0: the whole context.
  int64_t window = 0;
  // Multi-head latent attention (DeepSeek-V2) in place of attention when mla_kv_rank > 0
  // (llama style): keys and values from a latent of mla_kv_rank values a token, queries through
  // one of mla_q_rank (0: straight from x); each head's q and k have head_dim values without
  // RoPE and mla_rope_dim (0: head_dim / 2) with it, its values head_dim.
  int64_t mla_kv_rank = 0, mla_q_rank = 0, mla_rope_dim = 0;
  bool is_mla() const { return mla_kv_rank > 0; }
  nn::MlaConfig mla_config() const;
  // Style and tying are independent: GptConfig::llama() unties, the plain struct ties.
  bool tie_embeddings = true;
  int64_t swiglu_hidden = 0;  // llama: 0 means 8/3 * width rounded up to a multiple of 64
  double norm_eps = 0;        // the norms' epsilon; 0: the style's (gpt2 1e-5, llama 1e-6)
  // A mixture of experts in place of the MLP of every moe.every-th block (moe.experts > 0).
  // Its experts are the style's MLP (SwiGLU for llama, GELU for gpt2) of moe.hidden units
  // (0: mlp_hidden()).
  nn::MoeConfig moe{};
  // The blocks' sequence mixers, the pattern repeated over the depth: 'A' attention, 'M' a
  // Mamba-2 layer ("MMMA": one attention block in four, as Jamba). Every block keeps its MLP.
  std::string mixers = "A";
  nn::Mamba2Config ssm{};  // the Mamba-2 layers' sizes (ssm.dim: set from width)
  void validate() const;

  // Presets: the plain struct is gpt2; llama() sets style "llama" and an untied head.
  static GptConfig gpt2() { return GptConfig{}; }
  static GptConfig llama() {
    GptConfig c;
    c.style = GptStyle::Llama;
    c.tie_embeddings = false;
    return c;
  }

  bool is_llama() const { return style == GptStyle::Llama; }
  int64_t num_kv_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int64_t head_dim() const { return width / heads; }
  int64_t mlp_hidden() const;  // the MLP's hidden size for the style (see the fields above)
  double norm_epsilon() const { return norm_eps > 0 ? norm_eps : is_llama() ? 1e-6 : 1e-5; }
  nn::MoeConfig moe_config() const;  // moe with the style's experts and hidden size filled in
  bool is_moe_block(int64_t i) const { return moe.enabled() && (i + 1) % moe.every == 0; }
  bool is_ssm_block(int64_t i) const { return mixers[size_t(i) % mixers.size()] == 'M'; }
  bool has_ssm() const { return mixers.find('M') != std::string::npos; }
  nn::Mamba2Config ssm_config() const;  // ssm with dim = width
  // Parameters a token's forward uses: all but the experts it is not routed to.
  int64_t active_parameters(int64_t total) const;
};

// One pre-norm block: attention (or a Mamba-2 layer) and an MLP (or a mixture).
class GptBlock : public nn::Module {
 public:
  GptBlock(const GptConfig& c, bool moe, bool ssm);
  // x (B, T, C); positions (T) i64 global token positions (used by RoPE; may be undefined for
  // gpt2) -> (B, T, C).
  Tensor forward(const Tensor& x, const Tensor& positions = Tensor()) const;
  // Incremental decoding (the mixer's forward_cached): x (B, T, C), the rows after the cache's.
  Tensor forward_cached(const Tensor& x, nn::KvCache& cache, int64_t capacity) const;
  std::shared_ptr<nn::Module> norm1, norm2;  // nn::LayerNorm (gpt2) or nn::RMSNorm (llama)
  std::shared_ptr<nn::Attention> attn;       // causal; RoPE for llama; null in a Mamba-2 block
  std::shared_ptr<nn::LatentAttention> mla;  // latent attention in place of attn, or null
  std::shared_ptr<nn::Mamba2> ssm;           // the Mamba-2 layer in place of attn, or null
  std::shared_ptr<nn::Module> mlp;           // nn::Mlp (gpt2), nn::SwiGLU (llama) or nn::MoE

 private:
  Tensor mlp_of(const Tensor& n) const;  // the block's MLP (dense or a mixture)
  Tensor mix(const Tensor& n, const Tensor& positions) const;  // attention or the SSM
  bool llama_, moe_;
};

class Gpt : public nn::Module {
 public:
  explicit Gpt(const GptConfig& config);
  // ids (B, T) i64 with T <= context; positions (T) i64 defaults to 0..T-1 (a sequence shard
  // passes its own global positions) -> logits (B, T, vocab_size) f32.
  Tensor forward(const Tensor& ids, const Tensor& positions = Tensor()) const;
  // Mean cross-entropy over all tokens of forward(ids) against targets (B, T) i64 (entries
  // equal to -100 are ignored); a f32 scalar.
  Tensor loss(const Tensor& ids, const Tensor& targets, const Tensor& positions = Tensor()) const;

  // The pieces of forward, for pipeline stages applied from outside:
  // forward(ids) = head(run_blocks(embed(ids, positions), positions, 0, depth)).
  Tensor embed(const Tensor& ids, const Tensor& positions) const;  // -> (B, T, C)
  // Blocks [begin, end) on h (B, T, C) at positions (T) -> (B, T, C).
  Tensor run_blocks(Tensor h, const Tensor& positions, int64_t begin, int64_t end) const;
  Tensor head(const Tensor& h) const;  // (B, T, C) -> final norm -> logits (B, T, V)
  // The final norm's output, the head's input: ids (B, T) -> (B, T, C) (a text's features).
  Tensor features(const Tensor& ids) const;
  // Incremental decoding without a graph: ids (B, T) are the tokens at positions [length,
  // length + T) of sequences whose first `length` tokens the cache holds (a new cache: empty,
  // one KvCache a block, each holding at most model.context rows) -> their logits (B, T, V);
  // the cache then holds length + T. forward_cached over a sequence in pieces equals forward
  // over the whole of it.
  Tensor forward_cached(const Tensor& ids, std::vector<nn::KvCache>& cache) const;
  // 0..T-1 after checking T against the context; the default positions of forward.
  Tensor default_positions(int64_t T) const;

  const GptConfig config;
  std::shared_ptr<nn::Embedding> tok_embed;  // (V, C)
  std::shared_ptr<nn::Embedding> pos_embed;  // (context, C); null for llama
  // The transformer blocks, for activation checkpointing and sharding applied from outside.
  std::vector<std::shared_ptr<GptBlock>> blocks;
  // Their parameter-name prefixes ("blocks.0", ...): the units FSDP/ZeRO flatten and shard.
  std::vector<std::string> block_names() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < blocks.size(); ++i) names.push_back("blocks." + std::to_string(i));
    return names;
  }
  // Tensor parallelism: attention heads split, the MLP's first linear(s) column-parallel and its
  // output projection row-parallel; the token embedding, the head and the loss split over the
  // vocabulary; norms and the position embedding stay whole.
  nn::ParallelPlan parallel_plan() const;
  std::shared_ptr<nn::Module> norm_f;             // nn::LayerNorm (gpt2) or nn::RMSNorm (llama)
  std::shared_ptr<nn::Linear> lm_head;            // (V, C), no bias; null when tied to tok_embed
  std::shared_ptr<nn::TiedProjection> tied_head;  // with tied embeddings: logits = h tok_embed^T
  std::shared_ptr<nn::CrossEntropy> criterion;    // the loss of loss()
};

}  // namespace loom::models
