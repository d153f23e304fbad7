#include "loom/train/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "loom/autograd/engine.h"
#include "loom/backend/backend.h"
#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/core/trace.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/ops/creation.h"
#include "loom/ops/matmul.h"
#include "loom/ops/shape.h"
#include "loom/optim/adamw.h"

namespace loom::train {

BenchSpec gpt_bench(std::string name, const models::GptConfig& config, int64_t batch, int64_t seq) {
  return {.name = std::move(name), .kind = "gpt", .gpt = config, .batch = batch, .seq = seq};
}

BenchSpec dit_bench(std::string name, const models::DitConfig& config, int64_t batch) {
  return {.name = std::move(name), .kind = "dit", .dit = config, .batch = batch};
}

BenchSpec vit_bench(std::string name, const models::VitConfig& config, int64_t batch) {
  return {.name = std::move(name), .kind = "vit", .vit = config, .batch = batch};
}

std::vector<BenchSpec> standard_bench_specs() {
  return {
      // GPT-2 124M: 12 layers, 12 heads, width 768, vocabulary 50304 (50257 padded to a
      // multiple of 64), tied embeddings, 1024 positions; batch 4 x 64 tokens.
      gpt_bench("gpt2_124m",
                {.vocab_size = 50304, .context = 1024, .width = 768, .depth = 12, .heads = 12}, 4,
                64),
      // The small GPT: 6 layers, width 384, 6 heads, byte vocabulary; batch 16 x 256.
      gpt_bench("gpt_small",
                {.vocab_size = 256, .context = 256, .width = 384, .depth = 6, .heads = 6}, 16, 256),
      // DiT-small: width 256, depth 6, 4 heads, patch 2 on 28x28x1 (196 tokens); batch 64.
      dit_bench("dit_small", {.patch = 2, .width = 256, .depth = 6, .heads = 4}, 64),
  };
}

BenchSpec bench_spec(const std::string& name) {
  std::string known;
  for (const BenchSpec& s : standard_bench_specs()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  LOOM_FAIL() << "bench: unknown config '" << name << "' (known: " << known << ", all)";
  return {};
}

namespace {

// Forward FLOPs of a pre-norm transformer block per token: the four projections (qkv, proj,
// and the two MLP matrices) 2 * (3 + 1 + 2 * mlp_ratio) * C^2, plus attention's two products
// 2 * 2 * keys * C, keys being the keys one query sees (on average).
double block_flops_per_token(double C, double mlp_hidden, double qkv_out, double keys) {
  return 2.0 * C * qkv_out + 2.0 * C * C + 2.0 * 2.0 * C * mlp_hidden + 4.0 * keys * C;
}

}  // namespace

double train_step_flops(const BenchSpec& spec) {
  double forward = 0;
  if (spec.kind == "gpt") {
    const models::GptConfig& c = spec.gpt;
    const double C = double(c.width), T = double(spec.seq);
    const double qkv_out = double(c.heads + 2 * c.num_kv_heads()) * double(c.head_dim());
    const double mlp = double(c.mlp_hidden()) * (c.is_llama() ? 1.5 : 1.0);  // SwiGLU: 3 matrices
    const double keys = (T + 1.0) / 2.0;  // causal: query t sees t + 1 keys
    const double per_token = double(c.depth) * block_flops_per_token(C, mlp, qkv_out, keys) +
                             2.0 * C * double(c.vocab_size);
    forward = per_token * T * double(spec.batch);
  } else if (spec.kind == "vit") {
    const models::VitConfig& c = spec.vit;
    const double D = double(c.width), S = double(c.image_size), g = S / double(c.patch);
    const double stem_in = c.stem_channels > 0 ? double(c.stem_channels) : double(c.channels);
    // The stem's two 3x3 convolutions at full resolution, then patch embedding, the blocks
    // (no adaLN) and the head.
    const double stem =
        c.stem_channels > 0 ? 2.0 * S * S * 9.0 * (double(c.channels) + stem_in) * stem_in : 0.0;
    const double per_token =
        double(c.depth) * block_flops_per_token(D, c.mlp_ratio * D, 3 * D, g * g) +
        2.0 * double(c.patch * c.patch) * stem_in * D;
    forward = (stem + per_token * g * g + 2.0 * D * double(c.num_classes)) * double(spec.batch);
  } else {
    const models::DitConfig& c = spec.dit;
    const double D = double(c.width), T = double(c.tokens());
    const double per_token = double(c.depth) * block_flops_per_token(D, c.mlp_ratio * D, 3 * D, T) +
                             2.0 * double(c.patch * c.patch * c.channels) * D * 2.0;  // embed + out
    // Conditioning per image: the timestep MLP (256 -> D -> D) and the adaLN projections.
    const double per_image =
        2.0 * (256.0 * D + D * D) + double(c.depth) * 2.0 * D * 6.0 * D + 2.0 * D * 2.0 * D;
    forward = (per_token * T + per_image) * double(spec.batch);
  }
  return 3.0 * forward;
}

double measure_gemm_ceiling(DType dtype, int64_t n) {
  // Square products large enough to reach the kernel's steady state; the best of a few runs,
  // so a moment of contention on a shared machine does not lower the ceiling. The operands
  // count as MemCategory::Other, so a training run's activation peak does not include them.
  Backend& backend = backend_for(cpu_device());
  auto operand = [&](const char* name) {
    Tensor t = Tensor::empty({1, n, n}, dtype, cpu_device(), MemCategory::Other);
    fill_uniform(t, RngKey{0, "bench.ceiling", name}, 0, -1.0f, 1.0f);
    return t;
  };
  const Tensor a = operand("a"), b = operand("b");
  const Tensor c = Tensor::empty({1, n, n}, dtype, cpu_device(), MemCategory::Other);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    backend.matmul(a, b, Tensor(), c);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep > 0) best = std::max(best, 2.0 * double(n) * double(n) * double(n) / s / 1e9);
  }
  return best;
}

namespace {

Tensor random_ids(const Shape& shape, int64_t vocab, const std::string& name) {
  const uint64_t key = RngKey{1, "bench.data", name}.hash();
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    ids[size_t(i)] = std::min(vocab - 1, int64_t(uniform_at(key, uint64_t(i)) * float(vocab)));
  return from_vector(ids, shape);
}

}  // namespace

BenchResult run_bench(const BenchSpec& spec, const BenchOptions& options, double ceiling_gflops) {
  LOOM_CHECK(options.steps > 0 && options.warmup >= 0)
      << "bench: steps must be positive and warmup non-negative (got " << options.steps << ", "
      << options.warmup << ")";
  LOOM_CHECK(options.precision == "f32" || options.precision == "bf16")
      << "bench: precision '" << options.precision << "' is not supported (f32 or bf16)";
  const DType compute = options.precision == "bf16" ? DType::BF16 : DType::F32;
  std::shared_ptr<nn::Module> model;
  std::function<Tensor()> loss_fn;
  if (spec.kind == "gpt") {
    auto gpt = std::make_shared<models::Gpt>(spec.gpt);
    Tensor ids = random_ids({spec.batch, spec.seq + 1}, spec.gpt.vocab_size, spec.name);
    Tensor inputs = contiguous(narrow(ids, 1, 0, spec.seq));
    Tensor targets = contiguous(narrow(ids, 1, 1, spec.seq));
    loss_fn = [gpt, inputs, targets] { return gpt->loss(inputs, targets); };
    model = gpt;
  } else {
    auto dit = std::make_shared<models::Dit>(spec.dit);
    const models::DitConfig& c = spec.dit;
    Tensor x0 =
        randn({spec.batch, c.channels, c.image_size, c.image_size}, RngKey{1, "bench.data", "x0"});
    Tensor labels = random_ids({spec.batch}, c.num_classes, spec.name);
    diffusion::FlowMatchingConfig flow;
    flow.null_class = c.num_classes;
    loss_fn = [dit, x0, labels, flow] {
      return diffusion::flow_matching_loss(
          [&](const Tensor& x, const Tensor& t, const Tensor& y) { return dit->forward(x, t, y); },
          x0, labels, flow, 1, 0);
    };
    model = dit;
  }
  model->init_parameters(0);
  optim::AdamWConfig adamw;
  adamw.lr = 1e-4;
  adamw.beta2 = 0.95;
  adamw.weight_decay = 0.1;
  optim::AdamW opt(model->named_parameters(), adamw);
  const std::vector<Tensor> params = model->parameters();

  BenchResult r;
  r.name = spec.name;
  r.precision = options.precision;
  // With a trace, one more step after the timed ones is recorded (tracing costs time).
  const int64_t timed_end = options.warmup + options.steps;
  const int64_t total = timed_end + (options.trace_path.empty() ? 0 : 1);
  for (int64_t i = 0; i < total; ++i) {
    if (i == timed_end) {
      model->name_for_trace();
      trace::name_this_thread("main");
      trace::start(trace::now_ns());
    }
    const auto start = std::chrono::steady_clock::now();
    Tensor loss;
    {
      AutocastGuard autocast(compute);
      loss = loss_fn();
      backward(loss);
    }
    {
      trace::Scope scope("clip_grad_norm", "optimizer");
      optim::clip_grad_norm(params, 1.0);
    }
    {
      trace::Scope scope("optimizer_step", "optimizer");
      opt.step(adamw.lr);
      opt.zero_grad();
    }
    r.final_loss = double(item(loss));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    LOOM_CHECK(std::isfinite(r.final_loss))
        << "bench: " << spec.name << " loss is not finite at step " << i;
    if (i >= options.warmup && i < timed_end) r.step_ms.push_back(ms);
  }
  if (!options.trace_path.empty())
    write_file_atomic(options.trace_path, trace::stop(0, spec.name + " " + options.precision));
  std::vector<double> sorted = r.step_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  r.median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  r.min_ms = sorted.front();
  r.max_ms = sorted.back();
  r.items_per_s = double(spec.items_per_step()) / (r.median_ms / 1e3);
  r.gflop_per_step = train_step_flops(spec) / 1e9;
  r.gflops = r.gflop_per_step / (r.median_ms / 1e3);
  r.ceiling_gflops = ceiling_gflops;
  r.mfu = ceiling_gflops > 0 ? r.gflops / ceiling_gflops : 0;
  return r;
}

}  // namespace loom::train
