// A small Vision Transformer classifier (patch embedding, pre-norm blocks, mean pooling),
// used to evaluate generated images: class accuracy, and FID on its penultimate features.
// With time conditioning it classifies noisy images x_t at a flow-matching time t: the router
// of decentralized diffusion experts (which expert's cluster x_t comes from).
#pragma once
#include <memory>
#include <vector>

#include "loom/nn/layers.h"

namespace loom::models {

struct VitConfig {
  int64_t image_size = 28;
  int64_t channels = 1;
  int64_t patch = 4;
  int64_t width = 96;
  int64_t depth = 4;
  int64_t heads = 4;
  double mlp_ratio = 2.0;
  int64_t num_classes = 10;
  // > 0: a convolutional stem of two 3x3 convolutions with this many channels (each followed
  // by LayerNorm and GELU) in front of the patch embedding; early convolutions give a ViT the
  // local features a small one learns slowly from patches alone.
  int64_t stem_channels = 0;
  // The flow-matching time t in [0, 1] as a sinusoidal embedding through a 2-layer MLP, added
  // to every token after the patch embedding.
  bool time_conditioning = false;
  // > 0: the class label of the image too (an embedding of label_classes + 1 rows, the last
  // one "no label"), added to every token: a router that knows which class is being sampled.
  int64_t label_classes = 0;
  void validate() const;
};

class VitBlock : public nn::Module {
 public:
  explicit VitBlock(const VitConfig& c);
  Tensor forward(const Tensor& x) const;  // (B, T, D)
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
  std::shared_ptr<nn::Attention> attn;
  std::shared_ptr<nn::Mlp> mlp;
};

class Vit : public nn::Module {
 public:
  explicit Vit(const VitConfig& config);
  // images (B, C, H, W) in [-1, 1] (and with time conditioning t (B)) -> pooled, normalised
  // features (B, width).
  Tensor features(const Tensor& images, const Tensor& t = Tensor(),
                  const Tensor& labels = Tensor()) const;
  // -> class logits (B, num_classes).
  Tensor forward(const Tensor& images, const Tensor& t = Tensor(),
                 const Tensor& labels = Tensor()) const;
  Tensor logits_from_features(const Tensor& features) const;
  std::vector<std::shared_ptr<VitBlock>> blocks;
  const VitConfig config;

 private:
  std::shared_ptr<nn::Linear> patch_embed, head, t_fc1, t_fc2;
  std::shared_ptr<nn::Conv2d> stem1, stem2;
  std::shared_ptr<nn::LayerNorm> stem_norm1, stem_norm2;
  std::shared_ptr<nn::Embedding> pos_embed, label_embed;
  std::shared_ptr<nn::LayerNorm> norm_f;
};

}  // namespace loom::models
