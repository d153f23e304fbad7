#include "loom/plan/cost_model.h"

#include <algorithm>
#include <chrono>

#include "loom/backend/backend.h"
#include "loom/core/rng.h"
#include "loom/ops/creation.h"

namespace loom::plan {

StepShape gpt_step(std::string name, const models::GptConfig& config, int64_t batch, int64_t seq) {
  return {.name = std::move(name), .kind = "gpt", .gpt = config, .batch = batch, .seq = seq};
}

StepShape dit_step(std::string name, const models::DitConfig& config, int64_t batch) {
  return {.name = std::move(name), .kind = "dit", .dit = config, .batch = batch};
}

StepShape vit_step(std::string name, const models::VitConfig& config, int64_t batch) {
  return {.name = std::move(name), .kind = "vit", .vit = config, .batch = batch};
}

namespace {

// Forward FLOPs of a pre-norm transformer block per token: the four projections (qkv, proj,
// and the two MLP matrices) 2 * (3 + 1 + 2 * mlp_ratio) * C^2, plus attention's two products
// 2 * 2 * keys * C, keys being the keys one query sees (on average).
double block_flops_per_token(double C, double mlp_hidden, double qkv_out, double keys) {
  return 2.0 * C * qkv_out + 2.0 * C * C + 2.0 * 2.0 * C * mlp_hidden + 4.0 * keys * C;
}

}  // namespace

double train_step_flops(const StepShape& s) {
  double forward = 0;
  if (s.kind == "gpt") {
    const models::GptConfig& c = s.gpt;
    const double C = double(c.width), T = double(s.seq);
    const double qkv_out = double(c.heads + 2 * c.num_kv_heads()) * double(c.head_dim());
    const double swiglu = c.is_llama() ? 1.5 : 1.0;  // SwiGLU: 3 matrices
    const double keys = (T + 1.0) / 2.0;             // causal: query t sees t + 1 keys
    double per_token = 2.0 * C * double(c.vocab_size);
    const nn::MoeConfig moe = c.moe_config();
    for (int64_t i = 0; i < c.depth; ++i) {
      // A mixture's active FLOPs: the router and the k chosen (plus the shared) experts.
      const double mlp = c.is_moe_block(i)
                             ? double((moe.top_k + moe.shared_experts) * moe.hidden) * swiglu
                             : double(c.mlp_hidden()) * swiglu;
      per_token += block_flops_per_token(C, mlp, qkv_out, keys) +
                   (c.is_moe_block(i) ? 2.0 * C * double(moe.experts) : 0.0);
    }
    forward = per_token * T * double(s.batch);
  } else if (s.kind == "vit") {
    const models::VitConfig& c = s.vit;
    const double D = double(c.width), S = double(c.image_size), g = S / double(c.patch);
    const double stem_in = c.stem_channels > 0 ? double(c.stem_channels) : double(c.channels);
    // The stem's two 3x3 convolutions at full resolution, then patch embedding, the blocks
    // (no adaLN) and the head.
    const double stem =
        c.stem_channels > 0 ? 2.0 * S * S * 9.0 * (double(c.channels) + stem_in) * stem_in : 0.0;
    const double per_token =
        double(c.depth) * block_flops_per_token(D, c.mlp_ratio * D, 3 * D, g * g) +
        2.0 * double(c.patch * c.patch) * stem_in * D;
    forward = (stem + per_token * g * g + 2.0 * D * double(c.num_classes)) * double(s.batch);
  } else {
    const models::DitConfig& c = s.dit;
    const double D = double(c.width), T = double(c.tokens());
    double per_token = 2.0 * double(c.patch * c.patch * c.channels) * D * 2.0;  // embed + out
    const nn::MoeConfig moe = c.moe_config();
    for (int64_t i = 0; i < c.depth; ++i)  // a mixture: the router and the chosen experts
      per_token += c.is_moe_block(i)
                       ? block_flops_per_token(
                             D, double((moe.top_k + moe.shared_experts) * moe.hidden), 3 * D, T) +
                             2.0 * D * double(moe.experts)
                       : block_flops_per_token(D, c.mlp_ratio * D, 3 * D, T);
    // Conditioning per image: the timestep MLP (256 -> D -> D) and the adaLN projections.
    const double per_image =
        2.0 * (256.0 * D + D * D) + double(c.depth) * 2.0 * D * 6.0 * D + 2.0 * D * 2.0 * D;
    forward = (per_token * T + per_image) * double(s.batch);
  }
  return 3.0 * forward;
}

namespace {

// A model's mixtures of experts: each one's experts in place of the dense MLP's 8 w^2.
template <typename ModelConfig>
double mixture_extra_parameters(const ModelConfig& c) {
  const nn::MoeConfig moe = c.moe_config();
  const double w = double(c.width), per_block = double((moe.experts + moe.shared_experts) *
                                                       moe.expert_parameters(c.width));
  double extra = 0;
  for (int64_t i = 0; i < c.depth; ++i)
    if (c.is_moe_block(i)) extra += per_block - 8 * w * w;
  return extra;
}

}  // namespace

MemoryBound memory_lower_bound(const StepShape& s, int processes, int64_t tp) {
  // Per block: attention (4 w^2) and MLP (8 w^2 for gpt2 and DiT; llama's SwiGLU about as
  // much); the DiT's adaLN adds 6 w^2; the classifier has about the DiT's less adaLN.
  MemoryBound m;
  m.local_batch = double(s.batch) / double(std::max(processes, 1));
  auto image_bytes = [&](int64_t channels, int64_t size) {
    return m.local_batch * double(channels * size * size) * 4;
  };
  if (s.kind == "gpt") {
    const double w = double(s.gpt.width), d = double(s.gpt.depth);
    m.parameters = 12 * d * w * w + double(s.gpt.vocab_size) * w;
    m.parameters += mixture_extra_parameters(s.gpt);
    m.batch_bytes = m.local_batch * double(s.gpt.context) *
                    (8 + 4 * double(s.gpt.vocab_size) / double(std::max<int64_t>(tp, 1)));
  } else if (s.kind == "dit") {
    const double w = double(s.dit.width), d = double(s.dit.depth);
    m.parameters = 18 * d * w * w;
    m.parameters += mixture_extra_parameters(s.dit);
    m.batch_bytes = image_bytes(s.dit.channels, s.dit.image_size);
  } else {
    const double w = double(s.vit.width), d = double(s.vit.depth);
    m.parameters = 12 * d * w * w;
    m.batch_bytes = image_bytes(s.vit.channels, s.vit.image_size);
  }
  m.weight_bytes = 4 * m.parameters;
  return m;
}

namespace {

// GFLOP/s of the best of five timed n^3 products (after one warm-up), and the slowest one's
// seconds.
struct Ceiling {
  double gflops = 0, slowest_s = 0;
};

Ceiling time_square_gemm(DType dtype, int64_t n, Device device) {
  // Square products large enough to reach the kernel's steady state; the best of a few runs,
  // so a moment of contention on a shared machine does not lower the ceiling. The operands
  // count as MemCategory::Other, so a training run's activation peak does not include them.
  Backend& backend = backend_for(device);
  auto operand = [&](const char* name) {
    Tensor t = Tensor::empty({1, n, n}, dtype, device, MemCategory::Other);
    fill_uniform(t, RngKey{0, "bench.ceiling", name}, 0, -1.0f, 1.0f);
    return t;
  };
  const Tensor a = operand("a"), b = operand("b");
  const Tensor c = Tensor::empty({1, n, n}, dtype, device, MemCategory::Other);
  // A device queues the product: reading one element back waits for it.
  const Tensor one = Tensor::empty({1}, dtype, cpu_device(), MemCategory::Other);
  auto finish = [&] {
    if (device != cpu_device()) backend.copy(c.as_strided({1}, {1}, 0), one);
  };
  Ceiling r;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    backend.matmul(a, b, Tensor(), c);
    finish();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep == 0) continue;
    r.gflops = std::max(r.gflops, 2.0 * double(n) * double(n) * double(n) / s / 1e9);
    r.slowest_s = std::max(r.slowest_s, s);
  }
  return r;
}

}  // namespace

double measure_gemm_ceiling(DType dtype, int64_t n, Device device) {
  // On the CPU, rows of a multiple of 4 KB (n = 2048) are copied by the GEMM to a padded stride
  // first, which oneDNN 3.2 multiplies on its gemm:jit kernels; n - 8 stays dense and takes
  // brgemm, the kernel most model products run on (up to 15% faster with AMX). The ceiling is
  // the better of the two.
  if (device == cpu_device())
    return std::max(time_square_gemm(dtype, n, device).gflops,
                    time_square_gemm(dtype, n - 8, device).gflops);
  // A GPU reaches its rate only on products large enough to fill it: n doubles from the one
  // asked (up to 8192) while a product takes under 10 ms, and the best rate seen is kept.
  double best = 0;
  for (;; n *= 2) {
    const Ceiling c = time_square_gemm(dtype, n, device);
    best = std::max(best, c.gflops);
    if (c.slowest_s > 0.01 || n >= 8192) return best;
  }
}

}  // namespace loom::plan
