#include "loom/models/vit/vit.h"

#include "loom/models/dit/dit.h"
#include "loom/ops/ops.h"

namespace loom::models {

void VitConfig::validate() const {
  LOOM_CHECK(image_size > 0 && patch > 0 && image_size % patch == 0)
      << "vit: image_size " << image_size << " is not a multiple of patch " << patch;
  LOOM_CHECK(width > 0 && heads > 0 && width % heads == 0)
      << "vit: width " << width << " is not divisible by heads " << heads;
  LOOM_CHECK(depth > 0 && channels > 0 && num_classes > 1 && mlp_ratio > 0 && stem_channels >= 0)
      << "vit: depth, channels, mlp_ratio must be positive, stem_channels non-negative and "
      << "num_classes > 1";
}

VitBlock::VitBlock(const VitConfig& c) {
  const int64_t D = c.width;
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(D));
  attn = register_module("attn",
                         std::make_shared<nn::Attention>(nn::AttentionConfig{
                             D, c.heads, c.heads, false, 0.0, true, nn::Init::xavier_uniform()}));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(D));
  mlp = register_module("mlp", std::make_shared<nn::Mlp>(D, int64_t(double(D) * c.mlp_ratio)));
}

Tensor VitBlock::forward(const Tensor& x) const {
  Tensor h = add(x, attn->forward(norm1->forward(x)));  // (B, T, D)
  return add(h, mlp->forward(norm2->forward(h)));
}

Vit::Vit(const VitConfig& c) : config(c) {
  config.validate();
  const int64_t g = c.image_size / c.patch;
  const int64_t S = c.stem_channels;
  if (S > 0) {
    stem1 = register_module("stem.conv1", std::make_shared<nn::Conv2d>(c.channels, S, 3));
    stem_norm1 = register_module("stem.norm1", std::make_shared<nn::LayerNorm>(S));
    stem2 = register_module("stem.conv2", std::make_shared<nn::Conv2d>(S, S, 3));
    stem_norm2 = register_module("stem.norm2", std::make_shared<nn::LayerNorm>(S));
  }
  const int64_t patch_in = (S > 0 ? S : c.channels) * c.patch * c.patch;
  patch_embed = register_module("patch_embed", std::make_shared<nn::Linear>(patch_in, c.width));
  pos_embed = register_module("pos_embed", std::make_shared<nn::Embedding>(g * g, c.width));
  if (c.label_classes > 0)
    label_embed = register_module("label_embed",
                                  std::make_shared<nn::Embedding>(c.label_classes + 1, c.width));
  if (c.time_conditioning) {
    t_fc1 = register_module("t_embed.fc1", std::make_shared<nn::Linear>(256, c.width));
    t_fc2 = register_module("t_embed.fc2", std::make_shared<nn::Linear>(c.width, c.width));
  }
  for (int64_t i = 0; i < c.depth; ++i)
    blocks.push_back(register_module("blocks." + std::to_string(i), std::make_shared<VitBlock>(c)));
  norm_f = register_module("norm_f", std::make_shared<nn::LayerNorm>(c.width));
  head = register_module("head", std::make_shared<nn::Linear>(c.width, c.num_classes));
}

Tensor Vit::features(const Tensor& x, const Tensor& t, const Tensor& labels) const {
  LOOM_CHECK(labels.defined() == (config.label_classes > 0))
      << "vit: "
      << (config.label_classes > 0 ? "a label-conditioned model needs labels"
                                   : "a model without label conditioning takes none");
  LOOM_CHECK(t.defined() == config.time_conditioning)
      << "vit: "
      << (config.time_conditioning ? "a time-conditioned model needs t"
                                   : "a model without time conditioning takes no t");
  const int64_t B = x.size(0), C = config.channels, p = config.patch, g = config.image_size / p;
  LOOM_CHECK(x.dim() == 4 && x.size(1) == C && x.size(2) == config.image_size &&
             x.size(3) == config.image_size)
      << "vit: expected images (B, " << C << ", " << config.image_size << ", " << config.image_size
      << "), got " << x.shape();
  Tensor patches;
  if (stem1) {
    const int64_t S = config.stem_channels;
    Tensor h = permute(x, {0, 2, 3, 1});  // (B, H, W, C)
    h = gelu(stem_norm1->forward(stem1->forward(h)));
    h = gelu(stem_norm2->forward(stem2->forward(h)));  // (B, H, W, S)
    // (B, g, p, g, p, S) -> (B, g, g, p, p, S) -> (B, T, p p S), T = g g tokens
    patches =
        reshape(permute(reshape(h, {B, g, p, g, p, S}), {0, 1, 3, 2, 4, 5}), {B, g * g, p * p * S});
  } else {
    // (B, C, g, p, g, p) -> (B, g, g, C, p, p) -> (B, T, C p p)
    patches =
        reshape(permute(reshape(x, {B, C, g, p, g, p}), {0, 2, 4, 1, 3, 5}), {B, g * g, C * p * p});
  }
  Tensor h = add(patch_embed->forward(patches), pos_embed->weight);  // (B, T, D) + (T, D)
  if (t_fc1) {  // (B) -> (B, 256) -> (B, D), on every token
    const Tensor te =
        t_fc2->forward(silu(t_fc1->forward(models::timestep_embedding(t, 256, 1000))));
    h = add(h, unsqueeze(te, 1));
  }
  if (label_embed) h = add(h, unsqueeze(label_embed->forward(labels), 1));  // (B, 1, D)
  for (const auto& block : blocks)
    h = block->call({h}, [&block](const auto& in) { return block->forward(in[0]); });
  return mean(norm_f->forward(h), {1});  // (B, D)
}

// (B, D) features -> (B, K) logits, K = num_classes.
Tensor Vit::logits_from_features(const Tensor& f) const {
  return head->forward(f);
}

Tensor Vit::forward(const Tensor& x, const Tensor& t, const Tensor& labels) const {
  return logits_from_features(features(x, t, labels));
}

}  // namespace loom::models
