#include "loom/nn/layers.h"

#include <algorithm>

#include "loom/ops/conv.h"
#include "loom/ops/ops.h"

namespace loom::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, Init init, Init bias_init) {
  LOOM_CHECK(in > 0 && out > 0) << "Linear: sizes must be positive, got " << in << " -> " << out;
  weight = register_parameter("weight", {out, in}, init);
  if (has_bias) bias = register_parameter("bias", {out}, bias_init, /*weight_decay=*/false);
}

Tensor Linear::forward(const Tensor& x, AutocastOutput output) const {
  LOOM_CHECK(!gelu || output == AutocastOutput::Wide)
      << "Linear: a GELU layer's output stays f32 under autocast";
  return call({x}, [this, output](const std::vector<Tensor>& in) {
    return gelu ? linear_gelu(in[0], weight, bias) : linear(in[0], weight, bias, output);
  });
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k) : kernel(k) {
  LOOM_CHECK(in > 0 && out > 0 && k > 0 && k % 2 == 1)
      << "Conv2d: channels must be positive and the kernel odd, got " << in << " -> " << out
      << ", kernel " << k;
  weight = register_parameter("weight", {out, k * k * in}, Init::xavier_uniform());
  bias = register_parameter("bias", {out}, Init::zeros(), /*weight_decay=*/false);
}

Tensor Conv2d::forward(const Tensor& x) const {
  return conv2d(x, weight, bias, kernel);
}

Embedding::Embedding(int64_t num, int64_t dim, Init init) {
  weight = register_parameter("weight", {num, dim}, init, /*weight_decay=*/false);
}

Tensor Embedding::forward(const Tensor& ids) const {
  return call({ids}, [this](const std::vector<Tensor>& in) { return embedding(in[0], weight); });
}

Tensor TiedProjection::forward(const Tensor& x) const {
  return call({x}, [this](const std::vector<Tensor>& in) { return linear(in[0], weight_); });
}

Tensor CrossEntropy::forward(const Tensor& logits, const Tensor& targets) const {
  return call({logits, targets},
              [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); });
}

LayerNorm::LayerNorm(int64_t dim, bool affine, float eps_) : eps(eps_) {
  if (affine) {
    weight = register_parameter("weight", {dim}, Init::ones(), false);
    bias = register_parameter("bias", {dim}, Init::zeros(), false);
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return call(
      {x}, [this](const std::vector<Tensor>& in) { return layer_norm(in[0], weight, bias, eps); });
}

RMSNorm::RMSNorm(int64_t dim, float eps_) : eps(eps_) {
  weight = register_parameter("weight", {dim}, Init::ones(), false);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  return call({x}, [this](const std::vector<Tensor>& in) { return rms_norm(in[0], weight, eps); });
}

Mlp::Mlp(int64_t dim, int64_t hidden, Init init) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden, true, init));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim, true, init));
  fc1->gelu = true;
}

Tensor Mlp::forward(const Tensor& x) const {
  return fc2->forward(fc1->forward(x));
}

SwiGLU::SwiGLU(int64_t dim, int64_t hidden, Init init) {
  w1 = register_module("w1", std::make_shared<Linear>(dim, hidden, false, init));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, dim, false, init));
  w3 = register_module("w3", std::make_shared<Linear>(dim, hidden, false, init));
}

Tensor SwiGLU::forward(const Tensor& x) const {
  // (..., dim) -> w1, w3: (..., hidden) -> w2: (..., dim)
  return w2->forward(swiglu(w1->forward(x), w3->forward(x)));
}

Attention::Attention(const AttentionConfig& c) : config(c) {
  if (config.kv_heads == 0) config.kv_heads = config.heads;
  LOOM_CHECK(config.heads > 0 && config.dim % config.heads == 0)
      << "Attention: dim " << config.dim << " is not divisible by " << config.heads << " heads";
  LOOM_CHECK(config.heads % config.kv_heads == 0)
      << "Attention: " << config.heads << " heads are not a multiple of " << config.kv_heads
      << " kv heads";
  LOOM_CHECK(config.window >= 0 && (config.window == 0 || config.causal))
      << "Attention: a sliding window (" << config.window << ") is for causal attention";
  head_dim = config.dim / config.heads;
  const int64_t qkv_out = (config.heads + 2 * config.kv_heads) * head_dim;
  qkv = register_module(
      "qkv",
      std::make_shared<Linear>(config.dim, qkv_out, config.bias || config.qkv_bias, config.init));
  proj = register_module(
      "proj", std::make_shared<Linear>(config.dim, config.dim, config.bias, config.init));
}

Tensor Attention::forward(const Tensor& x, const Tensor& positions) const {
  return call({x, positions},
              [this](const std::vector<Tensor>& in) { return attend(in[0], in[1]); });
}

Tensor Attention::attend(const Tensor& x, const Tensor& positions) const {
  const int64_t H = config.heads, Dh = head_dim;
  // Under autocast the attention kernel takes q, k and v in bf16: the projection rounds them in
  // its GEMM, and the kernel's bf16 output and gradients pass to the projections as they are.
  // Not where RoPE rotates them (in f32) or a parallel core (ring attention) takes them.
  const AutocastOutput qkv_output =
      !core && config.rope_theta <= 0 ? AutocastOutput::Compute : AutocastOutput::Wide;
  const std::vector<Tensor> qkv_heads = project(x, positions, qkv_output);
  const Tensor &q = qkv_heads[0], &k = qkv_heads[1], &v = qkv_heads[2];
  const int64_t B = q.size(0), T = q.size(2);
  Tensor o = core ? core(q, k, v, positions, config.causal, config.window)
                  : scaled_dot_product_attention(q, k, v, Tensor(), config.causal, -1.0f,
                                                 config.window);  // (B, H, T, Dh)
  o = reshape(permute(o, {0, 2, 1, 3}), {B, T, H * Dh});          // merge heads: (B, T, H Dh)
  return proj->forward(o);                                        // (B, T, dim)
}

std::vector<Tensor> Attention::project(const Tensor& x, const Tensor& positions,
                                       AutocastOutput output) const {
  const int64_t H = config.heads, Hkv = config.kv_heads, Dh = head_dim;
  Tensor qkv_out = qkv->forward(x, output);  // (B, T, (H + 2 Hkv) * Dh)
  const int64_t B = qkv_out.size(0), T = qkv_out.size(1);
  auto parts = split(qkv_out, std::vector<int64_t>{H * Dh, Hkv * Dh, Hkv * Dh}, -1);
  auto heads = [&](const Tensor& t, int64_t n) {  // (B, T, n*Dh) -> (B, n, T, Dh), a view
    return permute(reshape(t, {B, T, n, Dh}), {0, 2, 1, 3});
  };
  Tensor q = heads(parts[0], H), k = heads(parts[1], Hkv), v = heads(parts[2], Hkv);
  if (config.rope_theta > 0) {
    LOOM_CHECK(positions.defined()) << "Attention: RoPE needs token positions";
    q = rope(q, positions, config.rope_theta, config.rope_scaling);
    k = rope(k, positions, config.rope_theta, config.rope_scaling);
  }
  return {q, k, v};
}

Tensor Attention::forward_cached(const Tensor& x, KvCache& cache, int64_t capacity) const {
  NoGradGuard no_grad;
  LOOM_CHECK(!core) << "Attention: incremental decoding runs on the whole model (no parallel "
                       "attention core)";
  const int64_t H = config.heads, Hkv = config.kv_heads, Dh = head_dim;
  const int64_t B = x.size(0), T = x.size(1), at = cache.length;
  if (!cache.k.defined()) {
    cache.k = zeros({B, Hkv, capacity, Dh}, DType::F32, x.device());
    cache.v = zeros({B, Hkv, capacity, Dh}, DType::F32, x.device());
    cache.length = 0;
  }
  LOOM_CHECK(cache.k.size(0) == B && at + T <= cache.k.size(2))
      << "Attention: " << T << " more rows of a batch of " << B << " do not fit a cache of "
      << cache.k.size(0) << " x " << cache.k.size(2) << " rows holding " << at;
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) pos[size_t(i)] = at + i;
  const std::vector<Tensor> qkv_heads = project(x, from_vector(pos, {T}), AutocastOutput::Wide);
  copy_(narrow(cache.k, 2, at, T), qkv_heads[1]);
  copy_(narrow(cache.v, 2, at, T), qkv_heads[2]);
  cache.length = at + T;
  // Causal with the cache: row i sees keys j <= at + i (the kernel aligns the rows' ends).
  // With a window the first new row's oldest key is at - window + 1: only the cache's rows from
  // there are read, so a step costs the window, not the whole length.
  const int64_t from = config.window > 0 ? std::max<int64_t>(0, at - config.window + 1) : 0;
  Tensor o = scaled_dot_product_attention(
      qkv_heads[0], contiguous(narrow(cache.k, 2, from, at + T - from)),
      contiguous(narrow(cache.v, 2, from, at + T - from)), Tensor(), config.causal, -1.0f,
      config.window);                                     // (B, H, T, Dh)
  o = reshape(permute(o, {0, 2, 1, 3}), {B, T, H * Dh});  // (B, T, H Dh)
  return proj->forward(o);                                // (B, T, dim)
}

}  // namespace loom::nn
