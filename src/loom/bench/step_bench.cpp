#include "loom/bench/step_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "loom/backend/backend.h"
#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/json.h"
#include "loom/core/trace.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/world.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/parallelize.h"
#include "loom/plan/hardware_peak.h"
#include "loom/precision/recipe.h"
#include "loom/train/train_step.h"

namespace loom::bench {

BenchModel bench_model(train::Config config, int64_t samples, int64_t tokens) {
  const plan::StepShape shape = config.spec().step_shape(config, samples, tokens);
  return {std::move(config), shape};
}

namespace {

train::Config named(const std::string& name, train::ModelKind kind) {
  train::Config c;
  c.run.name = name;
  c.model_kind = kind;
  return c;
}

train::Config gpt(const std::string& name, const models::GptConfig& g) {
  train::Config c = named(name, train::ModelKind::Gpt);
  c.model = g;
  return c;
}

train::Config dit(const std::string& name, const models::DitConfig& d) {
  train::Config c = named(name, train::ModelKind::Dit);
  c.model = d;
  return c;
}

}  // namespace

std::vector<BenchModel> standard_bench_models() {
  return {
      // GPT-2 124M: 12 layers, 12 heads, width 768, vocabulary 50304 (50257 padded to a
      // multiple of 64), tied embeddings, 1024 positions; batch 4 x 64 tokens.
      bench_model(
          gpt("gpt2_124m",
              {.vocab_size = 50304, .context = 1024, .width = 768, .depth = 12, .heads = 12}),
          4, 64),
      // The small GPT: 6 layers, width 384, 6 heads, byte vocabulary; batch 16 x 256.
      bench_model(gpt("gpt_small",
                      {.vocab_size = 256, .context = 256, .width = 384, .depth = 6, .heads = 6}),
                  16, 256),
      // DiT-small: width 256, depth 6, 4 heads, patch 2 on 28x28x1 (196 tokens); batch 64.
      bench_model(dit("dit_small", {.patch = 2, .width = 256, .depth = 6, .heads = 4}), 64),
  };
}

BenchModel bench_model(const std::string& name) {
  std::string known;
  for (const BenchModel& m : standard_bench_models()) {
    if (m.shape.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.shape.name;
  }
  LOOM_FAIL() << "bench: unknown config '" << name << "' (known: " << known << ", all)";
  return {};
}

BenchResult run_bench(const BenchModel& bench, const BenchOptions& options, double ceiling_gflops) {
  LOOM_CHECK(options.steps > 0 && options.warmup >= 0)
      << "bench: steps must be positive and warmup non-negative (got " << options.steps << ", "
      << options.warmup << ")";
  const bool recipe = precision::is_recipe_name(options.precision);
  LOOM_CHECK(options.precision == "f32" || options.precision == "bf16" || recipe)
      << "bench: precision '" << options.precision << "' is not supported (f32, bf16, "
      << "fp8_tensorwise, fp8_delayed, fp8_blockwise, mxfp8 or nvfp4)";
  const bool tensorwise =
      options.precision == "fp8_tensorwise" || options.precision == "fp8_delayed";
  LOOM_CHECK(!recipe || tensorwise || options.device.type == DeviceType::CPU)
      << "bench: " << options.precision << " is emulated on the CPU only (fp8_tensorwise and "
      << "fp8_delayed run on the GPU)";
  const DType compute = options.precision == "f32" ? DType::F32 : DType::BF16;
  const plan::StepShape& spec = bench.shape;
  LOOM_CHECK(bench.config.spec().bench_step != nullptr)
      << "bench: model.kind " << bench.config.spec().name << " is not benchmarked";
  const train::BenchStep step = bench.config.spec().bench_step(bench.config, spec, options.device);
  nn::Module* model = step.model.get();
  const std::function<Tensor()>& loss_fn = step.loss;
  model->init_parameters(0);
  model->to(options.device);
  // A low-precision recipe with its defaults: its GEMMs emulated on the CPU (the cost of
  // emulation), on fp8 tensor cores on the GPU.
  std::unique_ptr<precision::LowPrecision> low;
  if (recipe)
    low = std::make_unique<precision::LowPrecision>(
        *model, precision::default_recipe_config(
                    precision::recipe_from_name(options.precision, "bench --precision")));
  // The trainer's own step (train/train_step.h) on the model parallelised for this one
  // process, as `loom train` runs it.
  const dist::DeviceMesh mesh(dist::world(), dist::ParallelDims{});
  const std::unique_ptr<parallel::ParallelModel> parallel_model = parallel::parallelize(
      *model, bench.config.spec().plan_of(*model), mesh, parallel::Topology{}, 1);
  optim::AdamWConfig adamw;
  adamw.lr = 1e-4;
  adamw.beta2 = 0.95;
  adamw.weight_decay = 0.1;
  const std::unique_ptr<optim::AdamW> opt =
      optim::make_adamw(parallel_model->optimizer_params(), adamw);
  train::TrainStep train_step(*parallel_model, *opt, compute, /*grad_accum=*/1, /*grad_clip=*/1.0);

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
    if (low) low->begin_step(i);
    const double loss = train_step.forward_backward([&](int64_t) { return loss_fn(); },
                                                    [](const Tensor& l) { return l; });
    if (low) low->end_step([](std::vector<float>&) {});  // one process: its own amaxes
    train_step.update(adamw.lr, train_step.grad_norm());
    train_step.zero_grad();
    r.final_loss = loss;
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
  r.gflop_per_step = plan::train_step_flops(spec) / 1e9;
  r.gflops = r.gflop_per_step / (r.median_ms / 1e3);
  r.ceiling_gflops = ceiling_gflops;
  r.mfu = ceiling_gflops > 0 ? r.gflops / ceiling_gflops : 0;
  return r;
}

void run_benchmarks(const std::vector<std::string>& names, const BenchOptions& options,
                    const std::string& json_path) {
  std::vector<BenchModel> specs;
  for (const auto& n : names) {  // all checked before any runs
    if (n != "all") specs.push_back(bench_model(n));
    if (n == "all")
      for (const auto& s : standard_bench_models()) specs.push_back(s);
  }
  LOOM_CHECK(options.trace_path.empty() || specs.size() == 1)
      << "bench: --trace writes one config's step; name one config (got " << specs.size() << ")";
  const DType dtype = options.precision == "f32" ? DType::F32 : DType::BF16;
  // The ceiling is measured before and after the runs and the higher kept: on a shared
  // machine a moment of contention would otherwise lower it (and inflate MFU).
  const Device device = options.device;
  const bool host = device == cpu_device();
  LOOM_CHECK(host || options.precision == "f32" || options.precision == "bf16" ||
             options.precision == "fp8_tensorwise" || options.precision == "fp8_delayed")
      << "bench: --precision " << options.precision << " is not built for " << device.str()
      << " yet (f32, bf16, fp8_tensorwise and fp8_delayed are)";
  const double ceiling_before = plan::measure_gemm_ceiling(dtype, 2048, device);
  std::vector<BenchResult> results;
  for (const auto& spec : specs) {
    results.push_back(run_bench(spec, options, 0));
    const auto& r = results.back();
    std::fprintf(stderr, "%s %s: %.1f ms/step (median of %zu)\n", r.name.c_str(),
                 r.precision.c_str(), r.median_ms, r.step_ms.size());
  }
  const double ceiling = std::max(ceiling_before, plan::measure_gemm_ceiling(dtype, 2048, device));
  plan::HardwarePeak peak;
  if (host) {
    peak = plan::measure_hardware_peak(dtype);
  } else {
    peak.instruction = "not measured on " + device.str();
  }
  std::printf(
      "GEMM ceiling (%s, %s through Loom's matmul, best of 5 before and after): %.1f "
      "GFLOP/s\n",
      options.precision.c_str(),
      host ? "2048^3 padded, 2040^3 dense" : "square, grown to fill the GPU", ceiling);
  if (peak.gflops > 0)
    std::printf(
        "hardware peak (%s loop in registers, %d threads at %.2f GHz measured, %.0f FLOP/cycle "
        "each): %.1f GFLOP/s\n",
        peak.instruction.c_str(), peak.threads, peak.clock_ghz, peak.flops_per_cycle, peak.gflops);
  else
    std::printf("hardware peak: %s (MFU-peak 0)\n", peak.instruction.c_str());
  std::printf("%-10s %-5s %9s %9s %9s %12s %8s %8s %9s %9s\n", "config", "dtype", "median_ms",
              "min_ms", "max_ms", "items/s", "GFLOP", "GFLOP/s", "MFU-GEMM", "MFU-peak");
  std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  LOOM_CHECK(json_path.empty() || json) << "bench: cannot open " << json_path << " for writing";
  for (size_t k = 0; k < specs.size(); ++k) {
    BenchResult& r = results[k];
    r.ceiling_gflops = ceiling;
    r.mfu = r.gflops / ceiling;
    r.hardware_gflops = peak.gflops;
    r.mfu_hardware = peak.gflops > 0 ? r.gflops / peak.gflops : 0;
    char items[32];
    std::snprintf(items, sizeof items, "%.1f %s", r.items_per_s, specs[k].shape.unit);
    std::printf("%-10s %-5s %9.1f %9.1f %9.1f %12s %8.1f %8.1f %8.1f%% %8.1f%%\n", r.name.c_str(),
                r.precision.c_str(), r.median_ms, r.min_ms, r.max_ms, items, r.gflop_per_step,
                r.gflops, 100.0 * r.mfu, 100.0 * r.mfu_hardware);
    if (json == nullptr) continue;
    const Json line = Json::object({{"config", r.name},
                                    {"precision", r.precision},
                                    {"ms", Json::Array(r.step_ms.begin(), r.step_ms.end())},
                                    {"median_ms", r.median_ms},
                                    {"items_per_s", r.items_per_s},
                                    {"unit", specs[k].shape.unit},
                                    {"gflop_per_step", r.gflop_per_step},
                                    {"gflops", r.gflops},
                                    {"ceiling_gflops", r.ceiling_gflops},
                                    {"mfu", r.mfu},
                                    {"hardware_gflops", r.hardware_gflops},
                                    {"hardware_instruction", peak.instruction},
                                    {"clock_ghz", peak.clock_ghz},
                                    {"mfu_hardware", r.mfu_hardware},
                                    {"loss", r.final_loss}});
    std::fprintf(json, "%s\n", line.dump().c_str());
  }
  if (json) std::fclose(json);
}

}  // namespace loom::bench
