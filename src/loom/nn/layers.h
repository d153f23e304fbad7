// The standard layers, as plain single-device modules.
#pragma once
#include <functional>

#include "loom/backend/rope_scaling.h"
#include "loom/nn/module.h"
#include "loom/ops/matmul.h"

namespace loom::nn {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, Init init = Init::xavier_uniform(),
         Init bias_init = Init::zeros());
  // (..., in) -> (..., out), through call() so that tensor parallelism can wrap it; output:
  // the dtype under autocast (ops/matmul.h; Wide only for a GELU layer).
  Tensor forward(const Tensor& x, AutocastOutput output = AutocastOutput::Wide) const;
  Tensor weight, bias;  // (out, in), (out) or undefined
  // forward returns gelu(x W^T + b) through the fused linear_gelu (Mlp's fc1). Elementwise, so
  // column parallelism keeps it; row parallelism refuses it (it would act on partial sums).
  bool gelu = false;
};

// Channels-last 2-D convolution, stride 1, "same" zero padding (ops/conv.h).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel);
  Tensor forward(const Tensor& x) const;  // (B, H, W, in) -> (B, H, W, out)
  Tensor weight, bias;                    // (out, kernel * kernel * in), (out)
  int64_t kernel;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Init init = Init::normal(0.02f));
  Tensor forward(const Tensor& ids) const;  // (...) i64 -> (..., dim), through call()
  Tensor weight;                            // (num, dim)
};

// The output projection tied to an embedding (x -> x W^T with the embedding's W): a module of
// its own, without parameters, so that parallelism can wrap it like a Linear.
class TiedProjection : public Module {
 public:
  explicit TiedProjection(const Embedding& embedding) : weight_(embedding.weight) {}
  Tensor forward(const Tensor& x) const;  // (..., dim) -> (..., num), through call()

 private:
  Tensor weight_;  // the embedding's parameter (the same tensor, whatever it becomes)
};

// Mean cross-entropy of logits (..., V) against targets (...) i64 (-100 ignored), as a module
// so that vocabulary parallelism can replace it by the version over split logits.
class CrossEntropy : public Module {
 public:
  Tensor forward(const Tensor& logits, const Tensor& targets) const;  // through call()
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, bool affine = true, float eps = 1e-5f);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // undefined without affine
  float eps;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, float eps = 1e-6f);
  Tensor forward(const Tensor& x) const;
  Tensor weight;
  float eps;
};

// Linear -> GELU (tanh) -> Linear; fc1 applies the GELU itself (Linear::gelu, fused).
class Mlp : public Module {
 public:
  Mlp(int64_t dim, int64_t hidden, Init init = Init::xavier_uniform());
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> fc1, fc2;
};

// Llama's gated MLP: w2(silu(w1 x) * w3 x), no biases.
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t dim, int64_t hidden, Init init = Init::normal(0.02f));
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> w1, w2, w3;
};

struct AttentionConfig {
  int64_t dim = 0;
  int64_t heads = 1;
  int64_t kv_heads = 0;  // 0: same as heads (MHA); fewer: GQA
  bool causal = false;
  double rope_theta = 0.0;  // 0: no rotary embedding
  bool bias = true;
  Init init = Init::xavier_uniform();
  RopeScaling rope_scaling{};  // Llama 3.x's frequency scaling (factor 1: none)
  bool qkv_bias = false;       // biases on the q, k, v projections even without `bias` (Qwen2)
  int64_t window = 0;  // causal only: each row sees its last `window` keys (Mistral); 0: all
};

// One block's state for incremental decoding, `length` positions decoded so far. An attention
// layer's keys and values: contiguous, preallocated (B, Hkv, capacity, Dh) each, rows [0,
// length) filled (a sliding window's decode reads only its last window rows). A Mamba-2 layer's
// (nn::Mamba2) is of fixed size whatever the length: its last conv - 1 convolution inputs (B, conv
// - 1, channels) and its state (B, H, P, N).
struct KvCache {
  Tensor k, v;
  Tensor conv, ssm;
  int64_t length = 0;
};

// A self-attention module whose attention proper -- q (B, H, T, Dh), k/v (B, Hkv, T, Dh),
// positions (T) i64 the global positions of the rows -> (B, H, T, Dh), causal or not, with a
// sliding window (> 0) or not -- parallelism may replace. Unset: the fused kernel over these
// rows; context parallelism sets ring or Ulysses attention over every rank's rows.
class AttentionModule : public Module {
 public:
  using Core = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& positions, bool causal, int64_t window)>;
  Core core;
};

// Multi-head (or grouped-query) self-attention with fused attention kernels.
class Attention : public AttentionModule {
 public:
  explicit Attention(const AttentionConfig& config);
  // x (B, T, dim); positions (T) i64 the global positions of x's rows, needed with RoPE. The
  // sequence length is that of qkv's output (sequence parallelism gathers the sequence there).
  // Through call(): context parallelism wraps it to pass its own rows' positions.
  Tensor forward(const Tensor& x, const Tensor& positions = Tensor()) const;
  // Incremental decoding, without a graph: x (B, T, dim) holds the rows at positions
  // [cache.length, cache.length + T); they attend to the cached rows and (causal) to each other,
  // and their keys and values join the cache. A new cache: cache.k undefined (allocated here
  // for `capacity` rows).
  Tensor forward_cached(const Tensor& x, KvCache& cache, int64_t capacity) const;
  // config.heads and kv_heads are the heads this module computes: tensor parallelism lowers
  // them to this rank's share (and shards qkv and proj to match); head_dim stays.
  AttentionConfig config;
  int64_t head_dim;
  std::shared_ptr<Linear> qkv, proj;

 private:
  Tensor attend(const Tensor& x, const Tensor& positions) const;
  // x's q (B, H, T, Dh), k and v (B, Hkv, T, Dh), RoPE applied at `positions`.
  std::vector<Tensor> project(const Tensor& x, const Tensor& positions,
                              AutocastOutput output) const;
};

}  // namespace loom::nn
