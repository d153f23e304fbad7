// `loom bench`'s pieces: the analytic FLOP count against the GEMMs a step really runs, the
// timing loop on a tiny config, and no system allocation in the steady-state step.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "loom/autograd/engine.h"
#include "loom/bench/step_bench.h"
#include "loom/core/allocator.h"
#include "loom/core/trace.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/ops/creation.h"
#include "loom/optim/adamw.h"
#include "loom/plan/hardware_peak.h"
#include "loom/train/profiler.h"

namespace loom::bench {
namespace {

using plan::StepShape;
using plan::train_step_flops;
using train::parse_profile_steps;
using train::ProfileWindow;

// Sum of the "flop" args of the matmul kernel calls in a trace (the traced backend writes
// 2 * batch * M * N * K for each).
double traced_gemm_flops(const std::string& json) {
  double total = 0;
  const std::string key = "\"flop\": ";
  for (size_t at = json.find(key); at != std::string::npos; at = json.find(key, at + 1))
    total += std::strtod(json.c_str() + at + key.size(), nullptr);
  return total;
}

BenchModel tiny_gpt() {
  train::Config c;
  c.run.name = "tiny_gpt";
  c.model_kind = train::ModelKind::Gpt;
  c.model = models::GptConfig{.vocab_size = 96, .context = 32, .width = 48, .depth = 2, .heads = 3};
  return bench_model(c, 2, 16);
}

BenchModel tiny_dit() {
  train::Config c;
  c.run.name = "tiny_dit";
  c.model_kind = train::ModelKind::Dit;
  c.model = models::DitConfig{.image_size = 8, .patch = 2, .width = 32, .depth = 2, .heads = 2};
  return bench_model(c, 3);
}

// Attention's two products per step (forward + backward = 3x forward), which the fused
// attention kernel computes and the GEMM count therefore does not see.
double attention_flops(const BenchModel& m) {
  const StepShape& s = m.shape;
  if (m.config.model_kind == train::ModelKind::Gpt) {
    const models::GptConfig& g = m.config.gpt();
    const double seq = double(s.items_per_sample), keys = (seq + 1) / 2;
    return 3.0 * double(g.depth) * 4.0 * keys * double(g.width) * seq * double(s.batch);
  }
  const models::DitConfig& d = m.config.dit();
  const double T = double(d.tokens());
  return 3.0 * double(d.depth) * 4.0 * T * double(d.width) * T * double(s.batch);
}

TEST(Bench, AnalyticFlopsMatchTheGemmsOfAStep) {
  for (const BenchModel& model : {tiny_gpt(), tiny_dit()}) {
    const StepShape& spec = model.shape;
    BenchOptions o;
    o.warmup = 0;
    o.steps = 1;
    trace::start(trace::now_ns());
    run_bench(model, o, 0);
    const std::string json = trace::stop(0, "test");
    const double counted = traced_gemm_flops(json) + attention_flops(model);
    // The step's GEMMs: forward, and dX and dW in backward; run_bench's own loss (item) and
    // the optimizer run none. The count leaves out only the patch/label embeddings' input
    // gradients (no dX of the first layer is computed), so it may fall short by those.
    EXPECT_NEAR(counted / train_step_flops(spec), 1.0, 0.03) << spec.name;
    EXPECT_LE(counted, train_step_flops(spec) * 1.0001) << spec.name;
  }
}

TEST(Bench, StandardConfigsHaveTheIssueShapes) {
  const BenchModel gpt2_model = bench_model("gpt2_124m");
  const StepShape& gpt2 = gpt2_model.shape;
  // GPT-2 small's 124M parameters (with the 1024-position table and tied head), and about 193
  // GFLOP per B4 x T64 step: 6 * 124M * 256 tokens plus attention.
  models::Gpt model(gpt2_model.config.gpt());
  EXPECT_NEAR(double(model.num_parameters()) / 1e6, 124.5, 0.5);
  EXPECT_NEAR(train_step_flops(gpt2) / 1e9, 190.7, 1.0);
  EXPECT_EQ(gpt2.items_per_step(), 256);
  EXPECT_EQ(bench_model("dit_small").shape.items_per_step(), 64);
  EXPECT_THROW(bench_model("gpt3"), Error);
}

TEST(Bench, TimesStepsAndReportsConsistentRates) {
  BenchOptions o;
  o.warmup = 1;
  o.steps = 3;
  const BenchResult r = run_bench(tiny_gpt(), o, 100.0);
  ASSERT_EQ(r.step_ms.size(), 3u);
  EXPECT_LE(r.min_ms, r.median_ms);
  EXPECT_LE(r.median_ms, r.max_ms);
  EXPECT_NEAR(r.items_per_s, 32.0 / (r.median_ms / 1e3), 1e-6 * r.items_per_s);
  EXPECT_NEAR(r.mfu, r.gflops / 100.0, 1e-12);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  o.precision = "f16";
  EXPECT_THROW(run_bench(tiny_gpt(), o, 100.0), Error);
}

TEST(Bench, SteadyStateStepsMakeNoSystemAllocation) {
  // After two warm-up steps every buffer a step needs is in the caching allocator's free
  // lists: further steps never call the system allocator. On one thread: with several, two
  // threads' kernel scratch buffers of one size are live at once only when the threads happen
  // to overlap, so a later step may still take one more block (bounded by threads x sizes).
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  BenchOptions o;
  o.warmup = 2;
  o.steps = 1;
  run_bench(tiny_dit(), o, 0);  // warms the caches of a model of these shapes
  const int64_t before = host_allocator().stats().system_allocs;
  o.warmup = 0;
  o.steps = 3;
  // A fresh model of the same shapes reuses the freed blocks of the first one.
  run_bench(tiny_dit(), o, 0);
  EXPECT_EQ(host_allocator().stats().system_allocs, before);
  omp_set_num_threads(threads);
}

// The peak loop's FLOP count and clock, checked against what no loop can fake: a GEMM cannot
// multiply-add faster than the units it runs on, so the measured GEMM ceiling (its FLOPs
// counted from the product's size) must stay under the peak. A FLOP count per instruction off
// by 2x would show as a ceiling far above the peak. Both are timings on a shared machine (and
// under ctest beside other tests), so both run on one thread, each measured eight times,
// alternating, and the best of each compared, with room for noise (1.5x) but not for a 2x error.
TEST(HardwarePeak, BoundsTheGemmCeilingAndHasAPlausibleClock) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    plan::HardwarePeak best;
    double ceiling = 0;
    for (int round = 0; round < 8; ++round) {
      const plan::HardwarePeak peak = plan::measure_hardware_peak(dtype);
      if (peak.gflops >= best.gflops) best = peak;
      ceiling = std::max(ceiling, plan::measure_gemm_ceiling(dtype, 1024));
    }
    if (best.gflops == 0) {  // AMX whose tile state the kernel refused, or no FMA: said so
      EXPECT_FALSE(best.instruction.empty());
      continue;
    }
    EXPECT_EQ(best.threads, 1);
    EXPECT_GT(best.clock_ghz, 0.5);
    EXPECT_LT(best.clock_ghz, 7.0);
    EXPECT_GE(best.flops_per_cycle, 16.0 * 0.85);  // at least one 256-bit FMA unit
    EXPECT_LE(ceiling, 1.5 * best.gflops);
  }
  omp_set_num_threads(threads);
}

TEST(Profiler, ParsesStepWindows) {
  EXPECT_FALSE(parse_profile_steps("").on());
  const ProfileWindow w = parse_profile_steps("5:7");
  EXPECT_EQ(w.first, 5);
  EXPECT_EQ(w.last, 7);
  for (const char* bad : {"7:5", "0:2", "5", "a:b", "5:7x", "-1:3"})
    EXPECT_THROW(parse_profile_steps(bad), Error) << bad;
}

TEST(Profiler, ScopesRecordNothingWhenOff) {
  trace::start(trace::now_ns());
  const std::string empty = trace::stop(0, "t");
  { trace::Scope s("outside", "test"); }  // not recording
  const std::string after = trace::stop(0, "t");
  EXPECT_EQ(after.find("outside"), std::string::npos);
  EXPECT_EQ(empty, after);
}

}  // namespace
}  // namespace loom::bench
