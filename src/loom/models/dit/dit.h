// DiT (Peebles & Xie, "Scalable Diffusion Models with Transformers"), class-conditional, with
// adaLN-Zero blocks, predicting the flow-matching velocity. Plain single-device code.
#pragma once
#include <memory>
#include <vector>

#include "loom/nn/layers.h"
#include "loom/nn/moe.h"
#include "loom/nn/parallel_plan.h"

namespace loom::models {

struct DitConfig {
  int64_t image_size = 28;
  int64_t channels = 1;
  int64_t patch = 2;
  int64_t width = 256;
  int64_t depth = 6;
  int64_t heads = 4;
  double mlp_ratio = 4.0;
  int64_t num_classes = 10;  // label num_classes is the null class (classifier-free guidance)
  // A mixture of GELU experts in place of the MLP of every moe.every-th block (moe.experts >
  // 0), each of moe.hidden units (0: the MLP's mlp_ratio * width).
  nn::MoeConfig moe{};
  void validate() const;
  int64_t tokens() const { return (image_size / patch) * (image_size / patch); }
  int64_t mlp_hidden() const { return int64_t(double(width) * mlp_ratio); }
  nn::MoeConfig moe_config() const;  // moe with GELU experts and the hidden size filled in
  bool is_moe_block(int64_t i) const { return moe.enabled() && (i + 1) % moe.every == 0; }
  int64_t active_parameters(int64_t total) const;  // all but the experts a token skips
};

// One transformer block whose norms are modulated by the conditioning (adaLN-Zero: the
// modulation and hence the block start as the identity). The norms have no parameters of their
// own; each is fused with its modulation (layer_norm_modulate).
class DitBlock : public nn::Module {
 public:
  DitBlock(const DitConfig& c, bool moe);
  Tensor forward(const Tensor& x, const Tensor& c) const;  // x (B, T, D), c (B, D)
  std::shared_ptr<nn::Attention> attn;
  std::shared_ptr<nn::Module> mlp;  // nn::Mlp or nn::MoE
  std::shared_ptr<nn::Linear> ada;  // silu(c) -> 6 D: shift, scale, gate for attn and mlp
};

class Dit : public nn::Module {
 public:
  explicit Dit(const DitConfig& config);
  // x (B, C, H, W), t (B) f32 in [0, 1], y (B) i64 class (num_classes = unconditional)
  // -> velocity (B, C, H, W).
  Tensor forward(const Tensor& x, const Tensor& t, const Tensor& y) const;
  // The pieces of forward, for pipeline stages applied from outside:
  // forward(x, t, y) = head(run_blocks(h, c, 0, depth), c) with (h, c) = embed(x, t, y).
  struct Embedded {
    Tensor tokens;        // (B, T, D): patch embeddings plus positions
    Tensor conditioning;  // (B, D): timestep plus class embedding
  };
  Embedded embed(const Tensor& x, const Tensor& t, const Tensor& y) const;
  // Blocks [begin, end) on tokens h (B, T, D) with conditioning c (B, D) -> (B, T, D).
  Tensor run_blocks(Tensor h, const Tensor& c, int64_t begin, int64_t end) const;
  Tensor head(const Tensor& h, const Tensor& c) const;  // final adaLN layer, unpatchify
  // The transformer blocks, for activation checkpointing and sharding applied from outside.
  std::vector<std::shared_ptr<DitBlock>> blocks;
  // Their parameter-name prefixes ("blocks.0", ...): the units FSDP/ZeRO flatten and shard.
  std::vector<std::string> block_names() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < blocks.size(); ++i) names.push_back("blocks." + std::to_string(i));
    return names;
  }
  // Tensor parallelism: attention heads split, mlp.fc1 column- and mlp.fc2 row-parallel; the
  // adaLN modulation (small, from the conditioning) and the embeddings stay whole. Pipeline:
  // the embedders before the first stage, the final layer after the last.
  nn::ParallelPlan parallel_plan() const;
  const DitConfig config;

 private:
  std::shared_ptr<nn::Linear> patch_embed, t_fc1, t_fc2, final_ada, final_linear;
  std::shared_ptr<nn::Embedding> y_embed;
  Tensor pos_embed;  // (T, D) fixed 2-D sin-cos, not a parameter
};

// Sinusoidal embedding of (B) scalars t * scale into (B, dim), as in DiT's timestep embedder
// (t in [0, 1] scaled to DiT's 0..1000); computed in f64.
Tensor timestep_embedding(const Tensor& t, int64_t dim, double scale = 1.0,
                          double max_period = 10000.0);
// Fixed 2-D sin-cos position embedding for a grid x grid of tokens, (grid*grid, dim).
Tensor sincos_pos_embed_2d(int64_t dim, int64_t grid);

}  // namespace loom::models
