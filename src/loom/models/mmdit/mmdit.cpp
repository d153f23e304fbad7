#include "loom/models/mmdit/mmdit.h"

#include "loom/models/dit/dit.h"
#include "loom/ops/ops.h"

namespace loom::models {

namespace {
constexpr float kNormEps = 1e-6f;  // the adaLN norms and QK-norm, as SD3's
}  // namespace

void MmditConfig::validate() const {
  LOOM_CHECK(image_size > 0 && patch > 0 && image_size % patch == 0)
      << "mmdit: model.image_size " << image_size << " is not a multiple of model.patch " << patch;
  LOOM_CHECK(width > 0 && heads > 0 && width % heads == 0)
      << "mmdit: model.width " << width << " is not divisible by model.heads " << heads;
  LOOM_CHECK(width % 4 == 0) << "mmdit: model.width " << width
                             << " must be a multiple of 4 (2-D sin-cos positions)";
  LOOM_CHECK(depth > 0 && channels > 0 && mlp_ratio > 0 && text_depth >= 0)
      << "mmdit: model.depth, channels and mlp_ratio must be positive, text_depth >= 0";
  LOOM_CHECK(vocab > 1 && text_length > 0 && text_features >= 0)
      << "mmdit: the caption vocabulary (" << vocab << ") and model.text_length (" << text_length
      << ") must be positive";
}

TextEncoder::Block::Block(const MmditConfig& c) {
  const int64_t D = c.width;
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(D));
  attn = register_module("attn",
                         std::make_shared<nn::Attention>(nn::AttentionConfig{
                             D, c.heads, c.heads, false, 0.0, true, nn::Init::xavier_uniform()}));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(D));
  mlp = register_module("mlp", std::make_shared<nn::Mlp>(D, c.mlp_hidden()));
}

TextEncoder::TextEncoder(const MmditConfig& c) {
  if (c.text_features > 0)
    project_ = register_module("project", std::make_shared<nn::Linear>(c.text_features, c.width));
  else
    tokens_ = register_module("tokens", std::make_shared<nn::Embedding>(c.vocab, c.width));
  positions_ = register_parameter("positions", {c.text_length, c.width}, nn::Init::normal(0.02f),
                                  /*weight_decay=*/false);
  for (int64_t i = 0; i < c.text_depth; ++i)
    blocks.push_back(register_module("blocks." + std::to_string(i), std::make_shared<Block>(c)));
  norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(c.width));
}

Tensor TextEncoder::forward(const Tensor& ids) const {
  // Through call(): ZeRO-3 gathers the encoder's parameters around it (a unit of its own).
  LOOM_CHECK(tokens_ || features)
      << "mmdit: the text encoder reads a frozen model's features (model.text_encoder), and "
      << "none are attached";
  return call({ids}, [this](const std::vector<Tensor>& in) {
    const Tensor x = tokens_ ? tokens_->forward(in[0]) : project_->forward(features(in[0]));
    Tensor h = add(x, positions_);  // (B, L, D)
    for (const auto& b : blocks) {
      h = add(h, b->attn->forward(b->norm1->forward(h)));
      h = add(h, b->mlp->forward(b->norm2->forward(h)));
    }
    return norm_->forward(h);
  });
}

MmditStream::MmditStream(const MmditConfig& c) {
  const int64_t D = c.width;
  ada = register_module("ada", std::make_shared<nn::Linear>(D, 6 * D, true, nn::Init::zeros()));
  attn = register_module("attn",
                         std::make_shared<nn::Attention>(nn::AttentionConfig{
                             D, c.heads, c.heads, false, 0.0, true, nn::Init::xavier_uniform()}));
  q_norm = register_module("q_norm", std::make_shared<nn::RMSNorm>(D / c.heads, kNormEps));
  k_norm = register_module("k_norm", std::make_shared<nn::RMSNorm>(D / c.heads, kNormEps));
  mlp = register_module("mlp", std::make_shared<nn::Mlp>(D, c.mlp_hidden()));
}

MmditBlock::MmditBlock(const MmditConfig& c) : MmditBlockBase(c) {
  text = register_module("text", std::make_shared<MmditStream>(c));
  image = register_module("image", std::make_shared<MmditStream>(c));
}

int64_t MmditBlockBase::text_rows(int64_t rows) const {
  LOOM_CHECK(rows * text_length % tokens == 0)
      << "mmdit: " << rows << " rows of the joint sequence do not hold caption and image rows in "
      << "its proportion " << text_length << " : " << tokens - text_length;
  return rows * text_length / tokens;
}

Tensor MmditBlock::forward(const Tensor& x, const Tensor& c) const {
  const int64_t B = x.size(0), L = text_rows(x.size(1)), T = x.size(1) - L, D = c.size(-1);
  const MmditStream* streams[2] = {text.get(), image.get()};
  const Tensor rows[2] = {contiguous(narrow(x, 1, 0, L)), contiguous(narrow(x, 1, L, T))};
  std::vector<Tensor> mod[2], q(2), k(2), v(2);
  for (int s = 0; s < 2; ++s) {
    const MmditStream& st = *streams[s];
    mod[s] = split(st.ada->forward(silu(c)), D, -1);  // 6 x (B, D)
    for (Tensor& m : mod[s]) m = contiguous(m);
    const Tensor n = layer_norm_modulate(rows[s], mod[s][0], mod[s][1], kNormEps);
    // This stream's q, k, v (B, n, H Dh): H is the heads this rank computes (tensor
    // parallelism lowers it), each normalised over its Dh features, then (B, H, n, Dh). n:
    // the rows qkv gives (sequence parallelism gathers every rank's there).
    const int64_t H = st.attn->config.heads, Dh = st.attn->head_dim;
    auto parts = split(st.attn->qkv->forward(n), H * Dh, -1);
    auto split_heads = [&](const Tensor& t) {
      return reshape(contiguous(t), {B, t.size(1), H, Dh});
    };
    auto to_heads = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };  // (B, H, n, Dh)
    q[size_t(s)] = to_heads(st.q_norm->forward(split_heads(parts[0])));
    k[size_t(s)] = to_heads(st.k_norm->forward(split_heads(parts[1])));
    v[size_t(s)] = to_heads(split_heads(parts[2]));
  }
  // One attention over the joint sequence: every token sees every other, of either modality.
  // Through the image stream's attention core where parallelism set one (context parallelism:
  // ring or Ulysses attention over every rank's rows), in f32 as cores take it.
  const nn::Attention::Core& core = image->attn->core;
  Tensor o =
      core ? core(to_dtype(cat(q, 2), DType::F32), to_dtype(cat(k, 2), DType::F32),
                  to_dtype(cat(v, 2), DType::F32), Tensor(), false, 0)
           : scaled_dot_product_attention(cat(q, 2), cat(k, 2), cat(v, 2));  // (B, H, L + T, Dh)
  const int64_t n = o.size(2), Ln = text_rows(n);
  o = reshape(permute(o, {0, 2, 1, 3}), {B, n, o.size(1) * o.size(3)});
  const Tensor att[2] = {contiguous(narrow(o, 1, 0, Ln)), contiguous(narrow(o, 1, Ln, n - Ln))};
  std::vector<Tensor> out(2);
  for (int s = 0; s < 2; ++s) {
    const MmditStream& st = *streams[s];
    const Tensor x1 = gated_residual(rows[s], mod[s][2], st.attn->proj->forward(att[s]));
    const Tensor n = layer_norm_modulate(x1, mod[s][3], mod[s][4], kNormEps);
    out[size_t(s)] = gated_residual(x1, mod[s][5], st.mlp->forward(n));
  }
  return cat(out, 1);  // (B, L + T, D)
}

CrossAttentionBlock::CrossAttentionBlock(const MmditConfig& c)
    : MmditBlockBase(c), head_dim(c.width / c.heads) {
  const int64_t D = c.width;
  ada = register_module("ada", std::make_shared<nn::Linear>(D, 6 * D, true, nn::Init::zeros()));
  attn = register_module("attn",
                         std::make_shared<nn::Attention>(nn::AttentionConfig{
                             D, c.heads, c.heads, false, 0.0, true, nn::Init::xavier_uniform()}));
  // Separate q, k and v (not one fused projection): tensor parallelism splits each by heads.
  cross_q = register_module("cross.q", std::make_shared<nn::Linear>(D, D));
  // No key bias: it adds q.b to every key's score alike, which the softmax ignores.
  cross_k = register_module("cross.k", std::make_shared<nn::Linear>(D, D, false));
  cross_v = register_module("cross.v", std::make_shared<nn::Linear>(D, D));
  // Zero: the cross-attention starts as nothing, as the adaLN-gated branches do.
  cross_proj =
      register_module("cross.proj", std::make_shared<nn::Linear>(D, D, true, nn::Init::zeros()));
  mlp = register_module("mlp", std::make_shared<nn::Mlp>(D, c.mlp_hidden()));
}

Tensor CrossAttentionBlock::forward(const Tensor& x, const Tensor& c) const {
  const int64_t B = x.size(0), L = text_rows(x.size(1)), T = x.size(1) - L, D = c.size(-1);
  const Tensor text = contiguous(narrow(x, 1, 0, L)), image = contiguous(narrow(x, 1, L, T));
  auto mod = split(ada->forward(silu(c)), D, -1);  // 6 x (B, D)
  for (Tensor& m : mod) m = contiguous(m);
  Tensor h = gated_residual(image, mod[2],
                            attn->forward(layer_norm_modulate(image, mod[0], mod[1], kNormEps)));
  // (B, n, H Dh) -> (B, H, n, Dh); H: the heads this rank computes (tensor parallelism).
  auto heads = [&](const Tensor& t) {
    return permute(reshape(t, {B, t.size(1), t.size(2) / head_dim, head_dim}), {0, 2, 1, 3});
  };
  // Keys and values of the whole caption (under context parallelism cross.k and cross.v gather
  // every rank's caption rows: plan.context_inputs).
  Tensor o = scaled_dot_product_attention(heads(cross_q->forward(h)), heads(cross_k->forward(text)),
                                          heads(cross_v->forward(text)));  // (B, H, T, Dh)
  h = add(h, cross_proj->forward(
                 reshape(permute(o, {0, 2, 1, 3}), {B, o.size(2), o.size(1) * head_dim})));
  h = gated_residual(h, mod[5], mlp->forward(layer_norm_modulate(h, mod[3], mod[4], kNormEps)));
  return cat({text, h}, 1);
}

Mmdit::Mmdit(const MmditConfig& c) : config(c) {
  config.validate();
  const int64_t D = c.width, p = c.patch;
  text_ = register_module("text", std::make_shared<TextEncoder>(c));
  patch_embed = register_module(
      "patch_embed",
      std::make_shared<nn::Linear>(c.channels * p * p, D, true, nn::Init::xavier_uniform()));
  t_fc1 = register_module("t_embed.fc1",
                          std::make_shared<nn::Linear>(256, D, true, nn::Init::normal(0.02f)));
  t_fc2 = register_module("t_embed.fc2",
                          std::make_shared<nn::Linear>(D, D, true, nn::Init::normal(0.02f)));
  text_pool = register_module("text_pool",
                              std::make_shared<nn::Linear>(D, D, true, nn::Init::normal(0.02f)));
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string name = "blocks." + std::to_string(i);
    if (c.cross_attention)
      blocks.push_back(register_module(name, std::make_shared<CrossAttentionBlock>(c)));
    else
      blocks.push_back(register_module(name, std::make_shared<MmditBlock>(c)));
  }
  final_ada =
      register_module("final.ada", std::make_shared<nn::Linear>(D, 2 * D, true, nn::Init::zeros()));
  final_linear = register_module(
      "final.linear", std::make_shared<nn::Linear>(D, p * p * c.channels, true, nn::Init::zeros()));
  pos_embed = sincos_pos_embed_2d(D, c.image_size / p);  // (T, D)
  register_buffer(&pos_embed);
}

nn::ParallelPlan Mmdit::parallel_plan() const {
  nn::ParallelPlan plan;
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    plan.blocks.push_back(b);
    if (config.cross_attention) {
      plan.attention.push_back(b + ".attn");
      for (const char* l : {".cross.q", ".cross.k", ".cross.v", ".mlp.fc1"})
        plan.column.push_back(b + l);
      for (const char* l : {".cross.proj", ".mlp.fc2"}) plan.row.push_back(b + l);
      for (const char* l : {".cross.k", ".cross.v"}) plan.context_inputs.push_back(b + l);
      continue;
    }
    for (const char* s : {".text", ".image"}) {
      plan.attention.push_back(b + s + ".attn");
      plan.column.push_back(b + s + ".mlp.fc1");
      plan.row.push_back(b + s + ".mlp.fc2");
      plan.per_head.push_back(b + s + ".q_norm.weight");
      plan.per_head.push_back(b + s + ".k_norm.weight");
    }
  }
  plan.sequence_segments = {config.text_length, config.image_tokens()};
  plan.first_stage = {"text", "patch_embed", "t_embed.fc1", "t_embed.fc2", "text_pool"};
  plan.last_stage = {"final.ada", "final.linear"};
  return plan;
}

Mmdit::Embedded Mmdit::embed(const Tensor& x, const Tensor& t, const Tensor& caption) const {
  const int64_t B = x.size(0), C = config.channels, S = config.image_size, p = config.patch,
                g = S / p, L = config.text_length;
  LOOM_CHECK(x.dim() == 4 && x.size(1) == C && x.size(2) == S && x.size(3) == S)
      << "mmdit: expected images (B, " << C << ", " << S << ", " << S << "), got " << x.shape();
  LOOM_CHECK(t.shape() == Shape{B} && caption.shape() == (Shape{B, L}))
      << "mmdit: t " << t.shape() << " and captions " << caption.shape() << " must be (" << B
      << ") and (" << B << ", " << L << ")";
  // Patchify: (B, C, g, p, g, p) -> (B, g, g, C, p, p) -> (B, T, C p p).
  Tensor patches =
      reshape(permute(reshape(x, {B, C, g, p, g, p}), {0, 2, 4, 1, 3, 5}), {B, g * g, C * p * p});
  Tensor image = add(patch_embed->forward(patches), pos_embed);  // (B, T, D)
  Tensor text = text_->forward(caption);                         // (B, L, D)
  // Conditioning: the timestep's MLP (DiT's, t scaled to 0..1000) plus the pooled caption.
  Tensor temb = t_fc2->forward(silu(t_fc1->forward(timestep_embedding(t, 256, 1000.0))));
  Tensor pooled = text_pool->forward(mean(text, {1}));  // (B, D)
  return {cat({text, image}, 1), add(temb, pooled)};
}

Tensor Mmdit::head(const Tensor& h, const Tensor& c) const {
  const int64_t B = h.size(0), C = config.channels, S = config.image_size, p = config.patch,
                g = S / p, D = config.width, L = config.text_length;
  auto mod = split(final_ada->forward(silu(c)), D, -1);     // shift, scale
  const Tensor image = contiguous(narrow(h, 1, L, g * g));  // (B, T, D)
  Tensor out = final_linear->forward(
      layer_norm_modulate(image, contiguous(mod[0]), contiguous(mod[1]), kNormEps));
  // Unpatchify: (B, g, g, p, p, C) -> (B, C, g, p, g, p) -> (B, C, S, S).
  out = permute(reshape(out, {B, g, g, p, p, C}), {0, 5, 1, 3, 2, 4});
  return reshape(out, {B, C, S, S});
}

Tensor Mmdit::run_blocks(Tensor h, const Tensor& c, int64_t begin, int64_t end) const {
  for (int64_t i = begin; i < end; ++i) {
    const auto& block = blocks[size_t(i)];
    // Through call(): parallelism applied from outside wraps each block's forward.
    h = block->call({h, c}, [&block](const auto& in) { return block->forward(in[0], in[1]); });
  }
  return h;
}

Tensor Mmdit::forward(const Tensor& x, const Tensor& t, const Tensor& caption) const {
  const Embedded e = embed(x, t, caption);
  return head(run_blocks(e.tokens, e.conditioning, 0, int64_t(blocks.size())), e.conditioning);
}

}  // namespace loom::models
