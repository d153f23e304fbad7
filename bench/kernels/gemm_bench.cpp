// GEMM throughput of Loom's matmul against a direct oneDNN matmul call on the same shape,
// dtype and operand layouts, for the three GEMMs of a Linear layer (forward, dX, dW) at a
// transformer-sized shape, plus a small and a tiny shape (the tiny one shows per-call cost).
//
// Variants per case: loom (the op, loom::matmul, output allocation included), kernel (the
// backend call on a preallocated output), direct (the reference: a oneDNN primitive created
// once, on plain strided memory like Loom's), direct_any_weights (oneDNN picks the weight
// layout, reordered once before timing: what a blocked-weight cache could add).
//
// After the Google Benchmark runs, an A/B pass times loom and direct in alternation, call
// batch by call batch, and prints the median of the per-pair speed ratios: on a shared
// machine the load changes slowly compared to one pair, so this ratio is far steadier than
// one of two separately measured rates.
//
//   ./build/gemm_bench [--benchmark_filter=small] [--ab_seconds=3 (0: no A/B pass)]
//                      [--ab_only (only the A/B pass)]
#include <benchmark/benchmark.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/core/tensor.h"
#include "loom/ops/matmul.h"
#include "loom/ops/shape.h"

namespace {

using loom::DType;
using loom::Tensor;

// One GEMM out (M, N) = a (M, K) @ b (K, N), with each operand row-major or a transposed view.
struct GemmCase {
  const char* name;
  int64_t m, k, n;
  bool a_transposed, b_transposed;  // stored as (K, M) / (N, K) row-major and viewed transposed
};

// x (M, K) = (4096, 768), W (N, K) = (3072, 768), dY (M, N).
const std::vector<GemmCase> kCases = {
    {"fwd x@W^T 4096x768x3072", 4096, 768, 3072, false, true},  // out = x @ W^T
    {"dX dY@W 4096x3072x768", 4096, 3072, 768, false, false},   // dX = dY @ W
    {"dW dY^T@x 3072x4096x768", 3072, 4096, 768, true, false},  // dW = dY^T @ x
    {"small x@W^T 256x256x1024", 256, 256, 1024, false, true},
    {"tiny x@W^T 32x32x32", 32, 32, 32, false, true},  // per-call overhead dominates
};
const DType kDTypes[] = {DType::F32, DType::BF16};

double flops(const GemmCase& c) {
  return 2.0 * double(c.m) * double(c.n) * double(c.k);
}

void set_rate(benchmark::State& state, const GemmCase& c) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops(c), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// A (rows, cols) operand of uniform(-1, 1) values; transposed: stored as (cols, rows).
Tensor make_operand(int64_t rows, int64_t cols, bool transposed, DType dtype, uint32_t seed) {
  Tensor storage =
      Tensor::empty(transposed ? loom::Shape{cols, rows} : loom::Shape{rows, cols}, dtype);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < storage.numel(); ++i) {
    const float x = uniform(rng);
    if (dtype == DType::F32) {
      storage.data<float>()[i] = x;
    } else {
      storage.data<loom::bf16>()[i] = loom::to_bf16(x);
    }
  }
  return transposed ? loom::transpose(storage, 0, 1) : storage;
}

struct Operands {
  Tensor a, b;  // (M, K), (K, N)
};

Operands make_operands(const GemmCase& c, DType dtype) {
  return {make_operand(c.m, c.k, c.a_transposed, dtype, 1),
          make_operand(c.k, c.n, c.b_transposed, dtype, 2)};
}

// --- the reference: a direct oneDNN matmul ---

dnnl::memory::data_type dnnl_type(DType dtype) {
  return dtype == DType::F32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

dnnl::memory::desc plain_md(const Tensor& t) {
  return dnnl::memory::desc({t.size(0), t.size(1)}, dnnl_type(t.dtype()),
                            {t.stride(0), t.stride(1)});
}

// out = a @ b by one oneDNN primitive, created once. any_weights: oneDNN picks b's layout and
// b is reordered into it here, once.
class DirectGemm {
 public:
  DirectGemm(const Operands& ops, bool any_weights)
      : out_(Tensor::empty({ops.a.size(0), ops.b.size(1)}, ops.a.dtype())),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_) {
    const dnnl::memory::desc b_md = plain_md(ops.b);
    const dnnl::memory::desc wei_md =
        any_weights ? dnnl::memory::desc({ops.b.size(0), ops.b.size(1)}, dnnl_type(ops.b.dtype()),
                                         dnnl::memory::format_tag::any)
                    : b_md;
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(engine_, plain_md(ops.a), wei_md, plain_md(out_));
    } catch (const dnnl::error& e) {
      error_ = std::string("oneDNN has no matmul for this case on this CPU: ") + e.what();
      return;
    }
    impl_ = pd.impl_info_str();
    dnnl::memory b_mem(b_md, engine_, ops.b.data_ptr());
    dnnl::memory wei_mem = b_mem;
    if (pd.weights_desc() != b_md) {
      wei_mem = dnnl::memory(pd.weights_desc(), engine_);
      dnnl::reorder(b_mem, wei_mem).execute(stream_, b_mem, wei_mem);
    }
    primitive_ = dnnl::matmul(pd);
    args_ = {{DNNL_ARG_SRC, dnnl::memory(plain_md(ops.a), engine_, ops.a.data_ptr())},
             {DNNL_ARG_WEIGHTS, wei_mem},
             {DNNL_ARG_DST, dnnl::memory(plain_md(out_), engine_, out_.data_ptr())}};
    run();  // first touch of the output and of oneDNN's buffers
  }

  bool available() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& impl() const { return impl_; }
  void run() {
    primitive_.execute(stream_, args_);
    stream_.wait();
  }

 private:
  Tensor out_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul primitive_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string error_, impl_;
};

// --- Google Benchmark variants ---

void bench_loom(benchmark::State& state, GemmCase c, DType dtype) {
  const Operands ops = make_operands(c, dtype);
  benchmark::DoNotOptimize(loom::matmul(ops.a, ops.b));  // creates and caches the primitive
  for (auto _ : state) {
    Tensor out = loom::matmul(ops.a, ops.b);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_rate(state, c);
}

// The backend kernel alone: what the op layer adds is the difference to bench_loom.
void bench_kernel(benchmark::State& state, GemmCase c, DType dtype) {
  auto batched = [](const Tensor& t) {
    return t.as_strided({1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset());
  };
  const Operands ops = make_operands(c, dtype);
  const Tensor a = batched(ops.a), b = batched(ops.b);
  const Tensor out = Tensor::empty({1, c.m, c.n}, dtype);
  loom::Backend& backend = loom::cpu_backend();
  backend.matmul(a, b, Tensor(), out);
  for (auto _ : state) {
    backend.matmul(a, b, Tensor(), out);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_rate(state, c);
}

void bench_direct(benchmark::State& state, GemmCase c, DType dtype, bool any_weights) {
  DirectGemm direct(make_operands(c, dtype), any_weights);
  if (!direct.available()) {
    state.SkipWithError(direct.error().c_str());
    for (auto _ : state) {
    }
    return;
  }
  state.SetLabel(direct.impl());
  for (auto _ : state) direct.run();
  set_rate(state, c);
}

enum Variant { kLoom, kKernel, kDirect, kDirectAny };
const char* kVariants[] = {"loom", "kernel", "direct", "direct_any_weights"};

std::string bench_name(const GemmCase& c, DType dtype, Variant variant) {
  return std::string(c.name) + "/" + loom::dtype_name(dtype) + "/" + kVariants[variant];
}

void register_all() {
  for (const GemmCase& c : kCases)
    for (DType dtype : kDTypes) {
      benchmark::internal::Benchmark* runs[] = {
          benchmark::RegisterBenchmark(bench_name(c, dtype, kLoom).c_str(), bench_loom, c, dtype),
          benchmark::RegisterBenchmark(bench_name(c, dtype, kKernel).c_str(), bench_kernel, c,
                                       dtype),
          benchmark::RegisterBenchmark(bench_name(c, dtype, kDirect).c_str(), bench_direct, c,
                                       dtype, false),
          benchmark::RegisterBenchmark(bench_name(c, dtype, kDirectAny).c_str(), bench_direct, c,
                                       dtype, true)};
      for (benchmark::internal::Benchmark* run : runs) {
        run->UseRealTime()->MinTime(0.5)->Unit(benchmark::kMillisecond);
      }
    }
}

// Prints runs like the console reporter and keeps each benchmark's best GFLOP/s (best over
// repetitions: other load on the machine only ever slows a run down).
class RateReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      auto it = run.counters.find("GFLOP/s");
      if (it == run.counters.end()) continue;
      double& best = best_[run.run_name.function_name];  // without the /min_time:... suffix
      best = std::max(best, double(it->second) / 1e9);
    }
  }
  double get(const std::string& name) const {
    auto it = best_.find(name);
    return it == best_.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> best_;
};

// --- the A/B pass ---

double seconds_of(const std::function<void()>& fn, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct AbResult {
  double loom_gflops = 0, direct_gflops = 0, ratio = 0;  // medians; ratio = loom / direct speed
  int pairs = 0;
};

// Alternates batches of loom and direct calls (order flipped every pair) for about `seconds`.
AbResult ab_compare(const GemmCase& c, const std::function<void()>& loom_call,
                    const std::function<void()>& direct_call, double seconds) {
  loom_call();
  direct_call();
  // A batch lasts at least ~5 ms, so timer resolution and call jitter do not matter.
  const int calls = std::max(1, int(0.005 / std::max(seconds_of(direct_call, 1), 1e-9)));
  std::vector<double> loom_s, direct_s, ratios;
  const auto start = std::chrono::steady_clock::now();
  for (int pair = 0;
       pair < 5 ||
       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds;
       ++pair) {
    double tl, td;
    if (pair % 2 == 0) {
      tl = seconds_of(loom_call, calls);
      td = seconds_of(direct_call, calls);
    } else {
      td = seconds_of(direct_call, calls);
      tl = seconds_of(loom_call, calls);
    }
    loom_s.push_back(tl / calls);
    direct_s.push_back(td / calls);
    ratios.push_back(td / tl);
  }
  AbResult r;
  r.loom_gflops = flops(c) / median(loom_s) / 1e9;
  r.direct_gflops = flops(c) / median(direct_s) / 1e9;
  r.ratio = median(ratios);
  r.pairs = int(ratios.size());
  return r;
}

std::string fmt(double x, const char* format = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, x);
  return x > 0 ? buf : "n/a";
}

void print_summary(const RateReporter& rates, double ab_seconds) {
  const std::regex filter(
      benchmark::GetBenchmarkFilter() == "all" ? "." : benchmark::GetBenchmarkFilter());
  std::printf("\n%d OpenMP threads\nGoogle Benchmark, best run, GFLOP/s:\n", omp_get_max_threads());
  const char* row = "%-26s %-5s %9s %9s %9s %9s\n";
  std::printf(row, "case", "dtype", "loom(op)", "kernel", "direct", "direct-anyW");
  for (const GemmCase& c : kCases)
    for (DType dtype : kDTypes) {
      const double v[4] = {
          rates.get(bench_name(c, dtype, kLoom)), rates.get(bench_name(c, dtype, kKernel)),
          rates.get(bench_name(c, dtype, kDirect)), rates.get(bench_name(c, dtype, kDirectAny))};
      if (v[0] == 0 && v[1] == 0 && v[2] == 0 && v[3] == 0) continue;
      std::printf(row, c.name, loom::dtype_name(dtype), fmt(v[0]).c_str(), fmt(v[1]).c_str(),
                  fmt(v[2]).c_str(), fmt(v[3]).c_str());
    }
  if (ab_seconds <= 0) return;

  std::printf("\nA/B pass (loom op vs direct oneDNN, alternating; medians), GFLOP/s:\n");
  const char* ab_row = "%-26s %-5s %9s %9s %8s %6s  %s\n";
  std::printf(ab_row, "case", "dtype", "loom", "direct", "ratio", "pairs", "reference");
  for (const GemmCase& c : kCases)
    for (DType dtype : kDTypes) {
      if (!std::regex_search(bench_name(c, dtype, kLoom), filter)) continue;
      const Operands ops = make_operands(c, dtype);
      // Without a oneDNN kernel for the dtype, the reference is direct f32 on the same shape.
      auto direct = std::make_unique<DirectGemm>(ops, false);
      std::string reference =
          "direct " + std::string(loom::dtype_name(dtype)) + " (" + direct->impl() + ")";
      if (!direct->available()) {
        direct = std::make_unique<DirectGemm>(make_operands(c, DType::F32), false);
        reference = "direct f32 (" + direct->impl() + "): oneDNN has no " +
                    loom::dtype_name(dtype) + " matmul on this CPU";
      }
      const AbResult r = ab_compare(
          c, [&] { benchmark::DoNotOptimize(loom::matmul(ops.a, ops.b).data_ptr()); },
          [&] { direct->run(); }, ab_seconds);
      std::printf(ab_row, c.name, loom::dtype_name(dtype), fmt(r.loom_gflops).c_str(),
                  fmt(r.direct_gflops).c_str(), fmt(r.ratio, "%.3f").c_str(),
                  std::to_string(r.pairs).c_str(), reference.c_str());
      std::fflush(stdout);
    }
  std::printf("ratio = median over pairs of (direct time / loom time); >= 0.90 is the target\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Our flags, taken out before Google Benchmark sees the arguments.
  double ab_seconds = 3.0;
  bool ab_only = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ab_seconds=", 13) == 0) {
      ab_seconds = std::atof(argv[i] + 13);
    } else if (std::strcmp(argv[i], "--ab_only") == 0) {
      ab_only = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RateReporter reporter;
  if (!ab_only) benchmark::RunSpecifiedBenchmarks(&reporter);
  print_summary(reporter, ab_seconds);
  benchmark::Shutdown();
  return 0;
}
