// MMDiT (Esser et al. 2024, "Scaling Rectified Flow Transformers for High-Resolution Image
// Synthesis"): a text-conditioned diffusion transformer whose text and image tokens keep
// weights of their own (adaLN modulation, q/k/v and output projections, MLP) and meet in one
// joint attention over both; q and k are RMS-normalised per head (QK-norm). The text comes from
// a small transformer encoder trained with the model: its tokens join the attention and their
// mean, projected, joins the timestep in the adaLN conditioning. The encoder starts from token
// embeddings, or from a frozen language model's features of the caption (model.text_encoder:
// attached from outside, projected to the width; the encoder's blocks then adapt them). Images are
// patchified with fixed 2-D sin-cos positions, as in the DiT. With model.conditioning = "cross" the
// blocks are PixArt-alpha's instead (Chen et al. 2023): image-only self-attention and MLP under
// adaLN, and a cross-attention from the image tokens to the encoded caption. Plain single-device
// code.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "loom/nn/layers.h"
#include "loom/nn/parallel_plan.h"

namespace loom::models {

struct MmditConfig {
  int64_t image_size = 64;
  int64_t channels = 1;
  int64_t patch = 4;
  int64_t width = 256;
  int64_t depth = 6;
  int64_t heads = 4;
  double mlp_ratio = 4.0;
  int64_t vocab = 32;            // caption tokens (data/captions.h); id 1 is the null caption's
  int64_t text_length = 40;      // tokens per caption, padded
  int64_t text_depth = 2;        // the text encoder's blocks
  int64_t text_features = 0;     // > 0: the encoder reads a frozen model's features this wide
  bool cross_attention = false;  // PixArt's blocks (model.conditioning "cross"), else joint
  void validate() const;
  int64_t image_tokens() const { return (image_size / patch) * (image_size / patch); }
  int64_t tokens() const { return text_length + image_tokens(); }  // the joint sequence
  int64_t mlp_hidden() const { return int64_t(double(width) * mlp_ratio); }
};

// A frozen model's features of captions: ids (B, L) i64 -> (B, L, text_features) f32, without
// a graph, on the ids' device.
using TextFeatures = std::function<Tensor(const Tensor& ids)>;

// A pre-norm transformer encoder over caption tokens: learned positions, full (not causal)
// attention, a final LayerNorm. ids (B, L) i64 -> (B, L, D). Its input: a token embedding, or
// (text_features > 0) the attached frozen features, projected.
class TextEncoder : public nn::Module {
 public:
  explicit TextEncoder(const MmditConfig& c);
  Tensor forward(const Tensor& ids) const;
  TextFeatures features;  // what text_features > 0 reads
  struct Block : nn::Module {
    explicit Block(const MmditConfig& c);
    std::shared_ptr<nn::LayerNorm> norm1, norm2;
    std::shared_ptr<nn::Attention> attn;
    std::shared_ptr<nn::Mlp> mlp;
  };
  std::vector<std::shared_ptr<Block>> blocks;

 private:
  std::shared_ptr<nn::Embedding> tokens_;  // text_features == 0
  std::shared_ptr<nn::Linear> project_;    // text_features > 0
  std::shared_ptr<nn::LayerNorm> norm_;
  Tensor positions_;  // (L, D), a parameter
};

// One modality's weights in a joint block: adaLN-Zero modulation, the attention's projections
// (an nn::Attention whose qkv and proj the joint attention uses, so tensor parallelism splits
// its heads as any attention's), QK-norm weights and the MLP.
struct MmditStream : nn::Module {
  explicit MmditStream(const MmditConfig& c);
  std::shared_ptr<nn::Linear> ada;  // silu(c) -> 6 D: shift, scale, gate for attn and mlp
  std::shared_ptr<nn::Attention> attn;
  std::shared_ptr<nn::RMSNorm> q_norm, k_norm;  // over each head's Dh features
  std::shared_ptr<nn::Mlp> mlp;
};

// A block of either kind on the joint sequence x (B, L + T, D), text rows first, with
// conditioning c (B, D) -> (B, L + T, D). x may hold a share of each instead, in the same
// proportion (a context- or sequence-parallel rank's rows: plan.sequence_segments), and the
// projections may gather the rows of every rank (sequence parallelism): each step takes the
// caption's rows as that proportion of the rows it has.
class MmditBlockBase : public nn::Module {
 public:
  explicit MmditBlockBase(const MmditConfig& c) : text_length(c.text_length), tokens(c.tokens()) {}
  virtual Tensor forward(const Tensor& x, const Tensor& c) const = 0;
  const int64_t text_length, tokens;

 protected:
  int64_t text_rows(int64_t rows) const;  // of `rows` rows of the sequence, the caption's
};

// A joint block: both streams change.
class MmditBlock : public MmditBlockBase {
 public:
  explicit MmditBlock(const MmditConfig& c);
  Tensor forward(const Tensor& x, const Tensor& c) const override;
  std::shared_ptr<MmditStream> text, image;
};

// PixArt's block: the image rows attend to themselves (adaLN-modulated), then to the caption's
// rows (a plain residual cross-attention, q from the image, k and v from the caption), then
// the MLP; the caption's rows pass through unchanged.
class CrossAttentionBlock : public MmditBlockBase {
 public:
  explicit CrossAttentionBlock(const MmditConfig& c);
  Tensor forward(const Tensor& x, const Tensor& c) const override;
  std::shared_ptr<nn::Linear> ada;  // silu(c) -> 6 D: shift, scale, gate for attn and mlp
  std::shared_ptr<nn::Attention> attn;
  std::shared_ptr<nn::Linear> cross_q, cross_k, cross_v, cross_proj;
  std::shared_ptr<nn::Mlp> mlp;
  const int64_t head_dim;
};

class Mmdit : public nn::Module {
 public:
  explicit Mmdit(const MmditConfig& config);
  // x (B, C, H, W), t (B) f32 in [0, 1], caption (B, L) i64 -> velocity (B, C, H, W).
  Tensor forward(const Tensor& x, const Tensor& t, const Tensor& caption) const;
  // forward(x, t, y) = head(run_blocks(h, c, 0, depth), c) with (h, c) = embed(x, t, y);
  // h is the joint sequence (B, L + T, D).
  struct Embedded {
    Tensor tokens;        // (B, L + T, D): encoded caption, then patches plus positions
    Tensor conditioning;  // (B, D): timestep plus pooled caption
  };
  Embedded embed(const Tensor& x, const Tensor& t, const Tensor& caption) const;
  Tensor run_blocks(Tensor h, const Tensor& c, int64_t begin, int64_t end) const;
  Tensor head(const Tensor& h, const Tensor& c) const;  // image rows: final adaLN, unpatchify
  std::vector<std::shared_ptr<MmditBlockBase>> blocks;
  // Tensor parallelism: each stream's attention heads split, mlp.fc1 column- and mlp.fc2
  // row-parallel; the text encoder, embedders and modulations stay whole. Pipeline: the text
  // encoder and embedders before the first stage, the final layer after the last.
  nn::ParallelPlan parallel_plan() const;
  // The frozen features the text encoder reads when config.text_features > 0.
  void attach_text_features(TextFeatures features) { text_->features = std::move(features); }
  const MmditConfig config;

 private:
  std::shared_ptr<TextEncoder> text_;
  std::shared_ptr<nn::Linear> patch_embed, t_fc1, t_fc2, text_pool, final_ada, final_linear;
  Tensor pos_embed;  // (T, D) fixed 2-D sin-cos, not a parameter
};

}  // namespace loom::models
