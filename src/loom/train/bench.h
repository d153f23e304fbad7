// `loom bench`: training-step throughput of the standard benchmark models, with achieved
// GFLOP/s and MFU against a GEMM ceiling measured at start-up (docs/performance.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/models/dit/dit.h"
#include "loom/models/gpt/gpt.h"
#include "loom/models/vit/vit.h"

namespace loom::train {

// One standard benchmark: a model and the shape of one training step.
struct BenchSpec {
  std::string name{};       // "gpt2_124m", "gpt_small", "dit_small"
  std::string kind{};       // "gpt", "dit" or "vit"
  models::GptConfig gpt{};  // kind gpt
  models::DitConfig dit{};  // kind dit
  models::VitConfig vit{};  // kind vit (the classifier; not a standard benchmark)
  int64_t batch = 1;
  int64_t seq = 0;  // gpt: tokens per sequence
  int64_t items_per_step() const { return kind == "gpt" ? batch * seq : batch; }
  const char* unit() const { return kind == "gpt" ? "tok" : "img"; }
};

// A GPT step of batch x seq tokens, or a DiT step of batch images.
BenchSpec gpt_bench(std::string name, const models::GptConfig& config, int64_t batch, int64_t seq);
BenchSpec dit_bench(std::string name, const models::DitConfig& config, int64_t batch);
BenchSpec vit_bench(std::string name, const models::VitConfig& config, int64_t batch);

// The standard configs (bench/compare/torch_bench.py mirrors them).
std::vector<BenchSpec> standard_bench_specs();
BenchSpec bench_spec(const std::string& name);  // throws naming the known ones

// FLOPs of one training step (forward + backward = 3x the forward's matmul FLOPs, attention's
// two products included, causal attention counting only the keys each query sees); the
// non-matmul ops are left out. See docs/performance.md for the per-layer terms.
double train_step_flops(const BenchSpec& spec);

struct BenchOptions {
  int64_t warmup = 2;
  int64_t steps = 5;
  std::string precision = "f32";  // "f32" or "bf16" (autocast: bf16 GEMMs, f32 master weights)
  std::string trace_path;         // non-empty: one more (untimed) step is traced into this file
};

struct BenchResult {
  std::string name, precision;
  std::vector<double> step_ms;  // the timed steps
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double items_per_s = 0;                 // at the median step time
  double gflop_per_step = 0, gflops = 0;  // achieved at the median
  double ceiling_gflops = 0;              // the measured GEMM ceiling in this dtype
  double mfu = 0;                         // gflops / ceiling_gflops
  double final_loss = 0;
};

// GFLOP/s of the best of a few square n x n x n GEMMs through Loom's matmul in `dtype`, at
// the calling thread's OpenMP thread count. `loom bench` uses n = 2048; the trainers' progress
// line a quicker 1024.
double measure_gemm_ceiling(DType dtype, int64_t n = 2048);

// Runs warm-up and timed AdamW steps (grad clip 1.0, weight decay 0.1) on synthetic data.
BenchResult run_bench(const BenchSpec& spec, const BenchOptions& options, double ceiling_gflops);

}  // namespace loom::train
