// `loom bench`: training-step throughput of the standard benchmark models, with achieved
// GFLOP/s and MFU against the GEMM ceiling and the hardware peak, both measured at start-up
// (docs/performance.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/device.h"

#include "loom/plan/cost_model.h"
#include "loom/train/config.h"

namespace loom::bench {

// A benchmarked model: a model kind's config (model.kind, its model section; run.name is the
// benchmark's name) and the shape of its step.
struct BenchModel {
  train::Config config;
  plan::StepShape shape;
};
// `samples` of `tokens` each (a sequence model's; 0: its context) of `config`'s model.
BenchModel bench_model(train::Config config, int64_t samples, int64_t tokens = 0);

// The standard configs (bench/compare/torch_bench.py mirrors them).
std::vector<BenchModel> standard_bench_models();
BenchModel bench_model(const std::string& name);  // throws naming the known ones

struct BenchOptions {
  int64_t warmup = 2;
  int64_t steps = 5;
  std::string precision = "f32";  // "f32" or "bf16" (autocast: bf16 GEMMs, f32 master weights)
  std::string trace_path;         // non-empty: one more (untimed) step is traced into this file
  Device device = cpu_device();   // where the model trains (data is made on the host, moved)
};

struct BenchResult {
  std::string name, precision;
  std::vector<double> step_ms;  // the timed steps
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double items_per_s = 0;                 // at the median step time
  double gflop_per_step = 0, gflops = 0;  // achieved at the median
  double ceiling_gflops = 0;              // the measured GEMM ceiling in this dtype
  double mfu = 0;                         // gflops / ceiling_gflops
  double hardware_gflops = 0;             // the measured vector peak (plan/hardware_peak.h)
  double mfu_hardware = 0;                // gflops / hardware_gflops
  double final_loss = 0;
};

// Runs warm-up and timed AdamW steps (grad clip 1.0, weight decay 0.1) on synthetic data.
BenchResult run_bench(const BenchModel& model, const BenchOptions& options, double ceiling_gflops);

// `loom bench NAMES...` ("all": the standard ones): the ceiling measured before and after,
// each config's steps timed, a table on stdout and, with json_path, one JSON line per config.
void run_benchmarks(const std::vector<std::string>& names, const BenchOptions& options,
                    const std::string& json_path);

}  // namespace loom::bench
