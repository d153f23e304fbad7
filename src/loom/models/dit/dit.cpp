#include "loom/models/dit/dit.h"

#include <cmath>

#include "loom/ops/ops.h"

namespace loom::models {

namespace {
// The adaLN norms: LayerNorm without affine parameters (the modulation supplies scale and
// shift), fused with that modulation (layer_norm_modulate).
constexpr float kNormEps = 1e-6f;
}  // namespace

void DitConfig::validate() const {
  LOOM_CHECK(image_size > 0 && patch > 0 && image_size % patch == 0)
      << "dit: image_size " << image_size << " is not a multiple of patch " << patch;
  LOOM_CHECK(width > 0 && heads > 0 && width % heads == 0)
      << "dit: width " << width << " is not divisible by heads " << heads;
  LOOM_CHECK(width % 4 == 0) << "dit: width " << width << " must be a multiple of 4 (2-D sin-cos)";
  LOOM_CHECK(depth > 0 && channels > 0 && num_classes > 0 && mlp_ratio > 0)
      << "dit: depth, channels, num_classes and mlp_ratio must be positive";
  if (moe.enabled()) moe_config().validate(depth);
}

Tensor timestep_embedding(const Tensor& t, int64_t dim, double scale, double max_period) {
  const std::vector<float> ts = to_vector(t);
  const int64_t B = int64_t(ts.size()), half = dim / 2;
  std::vector<float> out(size_t(B * dim), 0.0f);  // (B, dim): [cos | sin] per row
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::exp(-std::log(max_period) * double(i) / double(half));
      const double arg = double(ts[size_t(b)]) * scale * freq;
      out[size_t(b * dim + i)] = float(std::cos(arg));
      out[size_t(b * dim + half + i)] = float(std::sin(arg));
    }
  return from_vector(out, {B, dim}, DType::F32, t.device());
}

Tensor sincos_pos_embed_2d(int64_t dim, int64_t grid) {
  // Half the channels encode the row, half the column; each half is [sin | cos] over
  // frequencies 1 / 10000^(k / (dim/4)).
  std::vector<float> out(size_t(grid * grid * dim));  // (grid grid, dim), row r grid + c
  const int64_t quarter = dim / 4;
  for (int64_t r = 0; r < grid; ++r)
    for (int64_t c = 0; c < grid; ++c) {
      float* row = &out[size_t((r * grid + c) * dim)];
      for (int64_t k = 0; k < quarter; ++k) {
        const double omega = 1.0 / std::pow(10000.0, double(k) / double(quarter));
        row[k] = float(std::sin(double(c) * omega));
        row[quarter + k] = float(std::cos(double(c) * omega));
        row[2 * quarter + k] = float(std::sin(double(r) * omega));
        row[3 * quarter + k] = float(std::cos(double(r) * omega));
      }
    }
  return from_vector(out, {grid * grid, dim});
}

nn::MoeConfig DitConfig::moe_config() const {
  nn::MoeConfig m = moe;
  if (m.hidden == 0) m.hidden = mlp_hidden();
  m.swiglu = false;
  return m;
}

int64_t DitConfig::active_parameters(int64_t total) const {
  const nn::MoeConfig m = moe_config();
  for (int64_t i = 0; i < depth; ++i)
    if (is_moe_block(i)) total -= (m.experts - m.top_k) * m.expert_parameters(width);
  return total;
}

DitBlock::DitBlock(const DitConfig& c, bool moe) {
  const int64_t D = c.width;
  attn = register_module("attn",
                         std::make_shared<nn::Attention>(nn::AttentionConfig{
                             D, c.heads, c.heads, false, 0.0, true, nn::Init::xavier_uniform()}));
  if (moe)
    mlp = register_module("mlp",
                          std::make_shared<nn::MoE>(D, c.moe_config(), nn::Init::xavier_uniform()));
  else
    mlp = register_module("mlp", std::make_shared<nn::Mlp>(D, c.mlp_hidden()));
  ada = register_module("ada", std::make_shared<nn::Linear>(D, 6 * D, true, nn::Init::zeros()));
}

Tensor DitBlock::forward(const Tensor& x, const Tensor& c) const {
  auto mod = split(ada->forward(silu(c)), c.size(-1), -1);  // 6 x (B, D)
  // x, h, x1: (B, T, D); c: (B, D); mod: shift, scale, gate for attn, then for mlp.
  Tensor h =
      attn->forward(layer_norm_modulate(x, contiguous(mod[0]), contiguous(mod[1]), kNormEps));
  Tensor x1 = gated_residual(x, contiguous(mod[2]), h);
  const Tensor n = layer_norm_modulate(x1, contiguous(mod[3]), contiguous(mod[4]), kNormEps);
  h = dynamic_cast<const nn::MoE*>(mlp.get()) ? static_cast<const nn::MoE&>(*mlp).forward(n)
                                              : static_cast<const nn::Mlp&>(*mlp).forward(n);
  return gated_residual(x1, contiguous(mod[5]), h);
}

Dit::Dit(const DitConfig& c) : config(c) {
  config.validate();
  const int64_t D = c.width, p = c.patch;
  patch_embed = register_module(
      "patch_embed",
      std::make_shared<nn::Linear>(c.channels * p * p, D, true, nn::Init::xavier_uniform()));
  t_fc1 = register_module("t_embed.fc1",
                          std::make_shared<nn::Linear>(256, D, true, nn::Init::normal(0.02f)));
  t_fc2 = register_module("t_embed.fc2",
                          std::make_shared<nn::Linear>(D, D, true, nn::Init::normal(0.02f)));
  y_embed = register_module("y_embed", std::make_shared<nn::Embedding>(c.num_classes + 1, D));
  for (int64_t i = 0; i < c.depth; ++i)
    blocks.push_back(register_module("blocks." + std::to_string(i),
                                     std::make_shared<DitBlock>(c, c.is_moe_block(i))));
  final_ada =
      register_module("final.ada", std::make_shared<nn::Linear>(D, 2 * D, true, nn::Init::zeros()));
  final_linear = register_module(
      "final.linear", std::make_shared<nn::Linear>(D, p * p * c.channels, true, nn::Init::zeros()));
  pos_embed = sincos_pos_embed_2d(D, c.image_size / p);  // (T, D), T = (image_size / p)^2
  register_buffer(&pos_embed);
}

nn::ParallelPlan Dit::parallel_plan() const {
  nn::ParallelPlan plan;
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    plan.attention.push_back(b + ".attn");
    if (!config.is_moe_block(i)) {  // a mixture's experts stay whole (config.cpp: tp 1)
      plan.column.push_back(b + ".mlp.fc1");
      plan.row.push_back(b + ".mlp.fc2");
    }
    plan.blocks.push_back(b);
  }
  plan.first_stage = {"patch_embed", "t_embed.fc1", "t_embed.fc2", "y_embed"};
  plan.last_stage = {"final.ada", "final.linear"};
  return plan;
}

Dit::Embedded Dit::embed(const Tensor& x, const Tensor& t, const Tensor& y) const {
  const int64_t B = x.size(0), C = config.channels, S = config.image_size, p = config.patch,
                g = S / p;  // g patches per side, T = g g tokens
  LOOM_CHECK(x.dim() == 4 && x.size(1) == C && x.size(2) == S && x.size(3) == S)
      << "dit: expected images (B, " << C << ", " << S << ", " << S << "), got " << x.shape();
  LOOM_CHECK(t.shape() == Shape{B} && y.shape() == Shape{B})
      << "dit: t " << t.shape() << " and y " << y.shape() << " must be (" << B << ")";
  // Patchify: (B, C, g, p, g, p) -> (B, g, g, C, p, p) -> (B, T, C p p).
  Tensor patches =
      reshape(permute(reshape(x, {B, C, g, p, g, p}), {0, 2, 4, 1, 3, 5}), {B, g * g, C * p * p});
  Tensor h = add(patch_embed->forward(patches), pos_embed);  // (B, T, D)
  // Conditioning: timestep (scaled to DiT's 0..1000 range) MLP plus class embedding.
  // t (B) -> sinusoid (B, 256) -> temb (B, D); y (B) -> (B, D).
  Tensor temb = t_fc2->forward(silu(t_fc1->forward(timestep_embedding(t, 256, 1000.0))));
  return {h, add(temb, y_embed->forward(y))};  // tokens (B, T, D), conditioning (B, D)
}

Tensor Dit::head(const Tensor& h, const Tensor& c) const {
  const int64_t B = h.size(0), C = config.channels, S = config.image_size, p = config.patch,
                g = S / p, D = config.width;
  auto mod = split(final_ada->forward(silu(c)), D, -1);  // shift, scale
  Tensor out = final_linear->forward(
      layer_norm_modulate(h, contiguous(mod[0]), contiguous(mod[1]), kNormEps));  // (B, T, p p C)
  // Unpatchify: (B, g, g, p, p, C) -> (B, C, g, p, g, p) -> (B, C, S, S).
  out = permute(reshape(out, {B, g, g, p, p, C}), {0, 5, 1, 3, 2, 4});
  return reshape(out, {B, C, S, S});
}

Tensor Dit::run_blocks(Tensor h, const Tensor& c, int64_t begin, int64_t end) const {
  for (int64_t i = begin; i < end; ++i) {
    const auto& block = blocks[size_t(i)];
    // Through call(): parallelism applied from outside wraps each block's forward.
    h = block->call({h, c}, [&block](const auto& in) { return block->forward(in[0], in[1]); });
  }
  return h;
}

Tensor Dit::forward(const Tensor& x, const Tensor& t, const Tensor& y) const {
  const Embedded e = embed(x, t, y);
  return head(run_blocks(e.tokens, e.conditioning, 0, int64_t(blocks.size())), e.conditioning);
}

}  // namespace loom::models
