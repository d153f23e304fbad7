#include "loom/models/gpt/gpt.h"

#include "loom/ops/ops.h"

namespace loom::models {

namespace {

// Linear weights and embeddings: normal(0.02), as GPT-2 and Llama.
// GPT-2 also scales the residual output projections (attn.proj, mlp.fc2 / mlp.w2) to
// 0.02 / sqrt(2 depth); nn::AttentionConfig, nn::Mlp and nn::SwiGLU take one init for all their
// linears, so those keep 0.02 until the layers accept a separate output init.
const nn::Init kInit = nn::Init::normal(0.02f);

std::shared_ptr<nn::Module> make_norm(const GptConfig& c) {
  const float eps = float(c.norm_epsilon());
  if (c.is_llama()) return std::make_shared<nn::RMSNorm>(c.width, eps);
  return std::make_shared<nn::LayerNorm>(c.width, /*affine=*/true, eps);
}

Tensor apply_norm(const nn::Module& norm, bool llama, const Tensor& x) {
  if (llama) return static_cast<const nn::RMSNorm&>(norm).forward(x);
  return static_cast<const nn::LayerNorm&>(norm).forward(x);
}

}  // namespace

GptStyle gpt_style_from_name(const std::string& name, const std::string& what) {
  if (name == "gpt2") return GptStyle::Gpt2;
  LOOM_CHECK(name == "llama") << what << " '" << name << "' is not known (expected gpt2 or llama)";
  return GptStyle::Llama;
}

const char* name_of(GptStyle style) {
  return style == GptStyle::Llama ? "llama" : "gpt2";
}

void GptConfig::validate() const {
  LOOM_CHECK(vocab_size > 0) << "gpt: vocab_size must be positive, got " << vocab_size;
  LOOM_CHECK(context > 0) << "gpt: context must be positive, got " << context;
  LOOM_CHECK(width > 0) << "gpt: width must be positive, got " << width;
  LOOM_CHECK(depth > 0) << "gpt: depth must be positive, got " << depth;
  LOOM_CHECK(heads > 0) << "gpt: heads must be positive, got " << heads;
  LOOM_CHECK(width % heads == 0) << "gpt: width " << width << " is not divisible by heads "
                                 << heads;
  LOOM_CHECK(norm_eps >= 0) << "gpt: norm_eps must be >= 0 (0: the style's), got " << norm_eps;
  LOOM_CHECK(kv_heads >= 0) << "gpt: kv_heads must be >= 0 (0: same as heads), got " << kv_heads;
  LOOM_CHECK(heads % num_kv_heads() == 0)
      << "gpt: heads " << heads << " is not a multiple of kv_heads " << kv_heads;
  if (is_llama()) {
    LOOM_CHECK(rope_theta > 0) << "gpt: llama style needs rope_theta > 0, got " << rope_theta;
    const RopeScaling& s = rope_scaling;
    LOOM_CHECK(s.factor >= 1 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
               s.original_context > 0)
        << "gpt: rope_scaling_factor " << s.factor << " must be >= 1 (1: none), "
        << "rope_low_freq_factor " << s.low_freq_factor << " positive and below "
        << "rope_high_freq_factor " << s.high_freq_factor << ", rope_original_context "
        << s.original_context << " positive";
    LOOM_CHECK(head_dim() % 2 == 0) << "gpt: llama style (RoPE) needs an even head dim, got width "
                                    << width << " / heads " << heads << " = " << head_dim();
    LOOM_CHECK(swiglu_hidden >= 0)
        << "gpt: swiglu_hidden must be >= 0 (0: 8/3 width rounded up to 64), got " << swiglu_hidden;
  } else {
    LOOM_CHECK(rope_scaling.factor == 1)
        << "gpt: rope_scaling_factor is for style \"llama\" (gpt2 has learned positions)";
    LOOM_CHECK(!qkv_bias) << "gpt: qkv_bias is for style \"llama\" (gpt2's projections all "
                          << "have biases)";
    LOOM_CHECK(mlp_ratio > 0 && int64_t(mlp_ratio * double(width)) > 0)
        << "gpt: mlp_ratio " << mlp_ratio << " gives no MLP hidden units at width " << width;
    LOOM_CHECK(swiglu_hidden == 0)
        << "gpt: swiglu_hidden " << swiglu_hidden << " is only used by style \"llama\", not \""
        << name_of(style) << "\" (which uses mlp_ratio)";
  }
  if (moe.enabled()) moe_config().validate(depth);
  LOOM_CHECK(window >= 0) << "gpt: sliding_window " << window << " must be >= 0 (0: none)";
  if (is_mla()) {
    LOOM_CHECK(is_llama() && !qkv_bias && (kv_heads == 0 || kv_heads == heads))
        << "gpt: latent attention (mla_kv_rank " << mla_kv_rank << ") is for style \"llama\" "
        << "(RoPE) without qkv_bias, and has no key/value heads of its own (kv_heads " << kv_heads
        << ")";
    mla_config().validate();
  } else {
    LOOM_CHECK(mla_q_rank == 0 && mla_rope_dim == 0)
        << "gpt: mla_q_rank and mla_rope_dim are for latent attention (set mla_kv_rank)";
  }
  LOOM_CHECK(!mixers.empty() && mixers.find_first_not_of("AM") == std::string::npos)
      << "gpt: mixers '" << mixers << "' must be a pattern of A (attention) and M (Mamba-2), "
      << "e.g. \"MMMA\"";
  if (has_ssm()) ssm_config().validate();
}

nn::MlaConfig GptConfig::mla_config() const {
  nn::MlaConfig m;
  m.dim = width;
  m.heads = heads;
  m.kv_rank = mla_kv_rank;
  m.q_rank = mla_q_rank;
  m.nope_dim = head_dim();
  m.rope_dim = mla_rope_dim > 0 ? mla_rope_dim : head_dim() / 2;
  m.v_dim = head_dim();
  m.rope_theta = rope_theta;
  m.rope_scaling = rope_scaling;
  m.window = window;
  m.norm_eps = float(norm_epsilon());
  m.init = nn::Init::normal(0.02f);
  return m;
}

nn::Mamba2Config GptConfig::ssm_config() const {
  nn::Mamba2Config m = ssm;
  m.dim = width;
  m.norm_eps = float(norm_epsilon());
  m.init = nn::Init::normal(0.02f);
  return m;
}

int64_t GptConfig::mlp_hidden() const {
  if (!is_llama()) return int64_t(mlp_ratio * double(width));
  if (swiglu_hidden > 0) return swiglu_hidden;
  const int64_t h = (8 * width + 2) / 3;  // ceil(8/3 width)
  return (h + 63) / 64 * 64;
}

nn::MoeConfig GptConfig::moe_config() const {
  nn::MoeConfig m = moe;
  if (m.hidden == 0) m.hidden = mlp_hidden();
  m.swiglu = is_llama();
  return m;
}

int64_t GptConfig::active_parameters(int64_t total) const {
  const nn::MoeConfig m = moe_config();
  for (int64_t i = 0; i < depth; ++i)
    if (is_moe_block(i)) total -= (m.experts - m.top_k) * m.expert_parameters(width);
  return total;
}

GptBlock::GptBlock(const GptConfig& c, bool moe, bool ssm_mixer) : llama_(c.is_llama()), moe_(moe) {
  nn::AttentionConfig ac;
  ac.dim = c.width;
  ac.heads = c.heads;
  ac.kv_heads = c.num_kv_heads();
  ac.causal = true;
  ac.rope_theta = llama_ ? c.rope_theta : 0.0;
  ac.rope_scaling = c.rope_scaling;
  ac.bias = !llama_;
  ac.qkv_bias = c.qkv_bias;
  ac.window = c.window;
  ac.init = kInit;
  norm1 = register_module("norm1", make_norm(c));
  if (ssm_mixer)
    ssm = register_module("ssm", std::make_shared<nn::Mamba2>(c.ssm_config()));
  else if (c.is_mla())
    mla = register_module("attn", std::make_shared<nn::LatentAttention>(c.mla_config()));
  else
    attn = register_module("attn", std::make_shared<nn::Attention>(ac));
  norm2 = register_module("norm2", make_norm(c));
  if (moe_)
    mlp = register_module("mlp", std::make_shared<nn::MoE>(c.width, c.moe_config(), kInit));
  else if (llama_)
    mlp = register_module("mlp", std::make_shared<nn::SwiGLU>(c.width, c.mlp_hidden(), kInit));
  else
    mlp = register_module("mlp", std::make_shared<nn::Mlp>(c.width, c.mlp_hidden(), kInit));
}

Tensor GptBlock::forward(const Tensor& x, const Tensor& positions) const {
  Tensor h = add(x, mix(apply_norm(*norm1, llama_, x), positions));  // (B, T, C)
  return add(h, mlp_of(apply_norm(*norm2, llama_, h)));
}

Tensor GptBlock::mix(const Tensor& n, const Tensor& positions) const {  // (B, T, C)
  return ssm ? ssm->forward(n) : mla ? mla->forward(n, positions) : attn->forward(n, positions);
}

Tensor GptBlock::mlp_of(const Tensor& n) const {  // (B, T, C)
  return moe_     ? static_cast<const nn::MoE&>(*mlp).forward(n)
         : llama_ ? static_cast<const nn::SwiGLU&>(*mlp).forward(n)
                  : static_cast<const nn::Mlp&>(*mlp).forward(n);
}

Gpt::Gpt(const GptConfig& c) : config(c) {
  config.validate();
  const int64_t V = c.vocab_size, C = c.width;
  tok_embed = register_module("tok_embed", std::make_shared<nn::Embedding>(V, C, kInit));
  if (!c.is_llama())
    pos_embed = register_module("pos_embed", std::make_shared<nn::Embedding>(c.context, C, kInit));
  for (int64_t i = 0; i < c.depth; ++i)
    blocks.push_back(
        register_module("blocks." + std::to_string(i),
                        std::make_shared<GptBlock>(c, c.is_moe_block(i), c.is_ssm_block(i))));
  norm_f = register_module("norm_f", make_norm(c));
  if (!c.tie_embeddings)
    lm_head = register_module("lm_head", std::make_shared<nn::Linear>(C, V, false, kInit));
  else
    tied_head = register_module("tied_head", std::make_shared<nn::TiedProjection>(*tok_embed));
  criterion = register_module("criterion", std::make_shared<nn::CrossEntropy>());
}

nn::ParallelPlan Gpt::parallel_plan() const {
  nn::ParallelPlan plan;
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    if (config.is_ssm_block(i))
      plan.ssm.push_back(b + ".ssm");
    else if (config.is_mla())
      plan.latent_attention.push_back(b + ".attn");
    else
      plan.attention.push_back(b + ".attn");
    if (config.is_moe_block(i)) {
      // A mixture's experts are not split by tensor parallelism (config.cpp refuses tp > 1).
    } else if (config.is_llama()) {
      plan.column.insert(plan.column.end(), {b + ".mlp.w1", b + ".mlp.w3"});
      plan.row.push_back(b + ".mlp.w2");
    } else {
      plan.column.push_back(b + ".mlp.fc1");
      plan.row.push_back(b + ".mlp.fc2");
    }
    plan.blocks.push_back(b);
  }
  plan.first_stage = {"tok_embed"};
  if (pos_embed) plan.first_stage.push_back("pos_embed");
  plan.last_stage = {"norm_f", lm_head ? "lm_head" : "tok_embed"};
  plan.vocab_embedding = "tok_embed";
  plan.vocab_head = lm_head ? "lm_head" : "tied_head";
  plan.loss = "criterion";
  plan.sequence_shards = true;
  return plan;
}

Tensor Gpt::default_positions(int64_t T) const {
  LOOM_CHECK(T > 0 && T <= config.context)
      << "gpt: sequence length " << T << " must be in [1, context = " << config.context << "]";
  return arange(T);  // (T) i64
}

Tensor Gpt::embed(const Tensor& ids, const Tensor& positions) const {
  LOOM_CHECK(ids.dim() == 2 && ids.dtype() == DType::I64)
      << "gpt: expected token ids (B, T) i64, got " << ids.shape() << " "
      << dtype_name(ids.dtype());
  const int64_t T = ids.size(1);
  LOOM_CHECK(T <= config.context) << "gpt: sequence length " << T << " exceeds context "
                                  << config.context;
  LOOM_CHECK(positions.defined() && positions.shape() == Shape{T})
      << "gpt: positions must be (" << T << ") i64, got "
      << (positions.defined() ? shape_str(positions.shape()) : std::string("undefined"));
  Tensor h = tok_embed->forward(ids);                        // (B, T, C)
  if (pos_embed) h = add(h, pos_embed->forward(positions));  // + (T, C)
  return h;
}

Tensor Gpt::head(const Tensor& h) const {
  Tensor n = apply_norm(*norm_f, config.is_llama(), h);          // (B, T, C)
  return lm_head ? lm_head->forward(n) : tied_head->forward(n);  // (B, T, V)
}

Tensor GptBlock::forward_cached(const Tensor& x, nn::KvCache& cache, int64_t capacity) const {
  const Tensor n = apply_norm(*norm1, llama_, x);
  Tensor h = add(x, ssm   ? ssm->forward_cached(n, cache)
                    : mla ? mla->forward_cached(n, cache, capacity)
                          : attn->forward_cached(n, cache, capacity));
  return add(h, mlp_of(apply_norm(*norm2, llama_, h)));  // (B, T, C)
}

Tensor Gpt::forward_cached(const Tensor& ids, std::vector<nn::KvCache>& cache) const {
  NoGradGuard no_grad;
  LOOM_CHECK(ids.dim() == 2) << "gpt: expected token ids (B, T), got " << ids.shape();
  cache.resize(blocks.size());
  const int64_t at = cache[0].length, T = ids.size(1);
  LOOM_CHECK(T > 0 && at + T <= config.context) << "gpt: positions " << at << " to " << at + T - 1
                                                << " are beyond the context " << config.context;
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) pos[size_t(i)] = at + i;
  Tensor h = embed(ids, from_vector(pos, {T}));  // (B, T, C)
  for (size_t i = 0; i < blocks.size(); ++i)
    h = blocks[i]->forward_cached(h, cache[i], config.context);
  return head(h);  // (B, T, V)
}

Tensor Gpt::features(const Tensor& ids) const {
  LOOM_CHECK(ids.dim() == 2) << "gpt: expected token ids (B, T), got " << ids.shape();
  const Tensor pos = default_positions(ids.size(1));
  return apply_norm(*norm_f, config.is_llama(),
                    run_blocks(embed(ids, pos), pos, 0, int64_t(blocks.size())));
}

Tensor Gpt::forward(const Tensor& ids, const Tensor& positions) const {
  LOOM_CHECK(ids.dim() == 2) << "gpt: expected token ids (B, T), got " << ids.shape();
  const Tensor pos = positions.defined() ? positions : default_positions(ids.size(1));
  return head(run_blocks(embed(ids, pos), pos, 0, int64_t(blocks.size())));  // (B, T, V)
}

Tensor Gpt::run_blocks(Tensor h, const Tensor& positions, int64_t begin, int64_t end) const {
  for (int64_t i = begin; i < end; ++i) {
    const auto& block = blocks[size_t(i)];
    // Through call(): parallelism applied from outside wraps each block's forward.
    h = block->call(
        {h}, [&block, positions](const auto& in) { return block->forward(in[0], positions); });
  }
  return h;
}

Tensor Gpt::loss(const Tensor& ids, const Tensor& targets, const Tensor& positions) const {
  LOOM_CHECK(targets.shape() == ids.shape())
      << "gpt: targets " << targets.shape() << " must have the shape of ids " << ids.shape();
  return criterion->forward(forward(ids, positions), targets);  // (B, T, V) vs (B, T) -> ()
}

}  // namespace loom::models
