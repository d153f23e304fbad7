// GEMM throughput of Loom's matmul op against a direct oneDNN matmul call on the same shape,
// dtype and operand layouts, for the three GEMMs of a Linear layer (forward, dX, dW) at a
// transformer-sized shape and one small shape. The direct call is the reference: a primitive
// created once outside the timed loop, plain strided memory like Loom's. A third variant lets
// oneDNN choose the weight layout (format_tag::any, reordered once) to show what a blocked
// weight cache could add. The table at the end prints Loom / direct per case.
//
//   ./build/gemm_bench [--benchmark_filter=small] [--benchmark_repetitions=3
//                       --benchmark_enable_random_interleaving=true]
// On a loaded machine use repetitions with interleaving: the table keeps each case's best.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
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

void bench_loom(benchmark::State& state, GemmCase c, DType dtype) {
  Tensor a = make_operand(c.m, c.k, c.a_transposed, dtype, 1);
  Tensor b = make_operand(c.k, c.n, c.b_transposed, dtype, 2);
  benchmark::DoNotOptimize(loom::matmul(a, b));  // creates and caches the primitive
  for (auto _ : state) {
    Tensor out = loom::matmul(a, b);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_rate(state, c);
}

// The backend kernel alone, on a preallocated output: what the op layer adds is the
// difference to bench_loom.
void bench_kernel(benchmark::State& state, GemmCase c, DType dtype) {
  auto batched = [](const Tensor& t) {
    return t.as_strided({1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset());
  };
  Tensor a = batched(make_operand(c.m, c.k, c.a_transposed, dtype, 1));
  Tensor b = batched(make_operand(c.k, c.n, c.b_transposed, dtype, 2));
  Tensor out = Tensor::empty({1, c.m, c.n}, dtype);
  loom::Backend& backend = loom::cpu_backend();
  backend.matmul(a, b, Tensor(), out);
  for (auto _ : state) {
    backend.matmul(a, b, Tensor(), out);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  set_rate(state, c);
}

dnnl::memory::data_type dnnl_type(DType dtype) {
  return dtype == DType::F32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

dnnl::memory::desc plain_md(const Tensor& t) {
  return dnnl::memory::desc({t.size(0), t.size(1)}, dnnl_type(t.dtype()),
                            {t.stride(0), t.stride(1)});
}

// The reference: one oneDNN matmul primitive on the same memory. any_weights lets oneDNN pick
// the weight layout, the weights being reordered into it once before timing.
void bench_direct(benchmark::State& state, GemmCase c, DType dtype, bool any_weights) {
  Tensor a = make_operand(c.m, c.k, c.a_transposed, dtype, 1);
  Tensor b = make_operand(c.k, c.n, c.b_transposed, dtype, 2);
  Tensor out = Tensor::empty({c.m, c.n}, dtype);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc b_md = plain_md(b);
  const dnnl::memory::desc wei_md =
      any_weights ? dnnl::memory::desc({c.k, c.n}, dnnl_type(dtype), dnnl::memory::format_tag::any)
                  : b_md;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(plain_md(a), wei_md, plain_md(out)),
                                      engine);
  } catch (const dnnl::error& e) {
    state.SkipWithError(
        (std::string("oneDNN has no matmul for this case on this CPU: ") + e.what()).c_str());
    for (auto _ : state) {
    }
    return;
  }
  dnnl::memory a_mem(plain_md(a), engine, a.data_ptr());
  dnnl::memory b_mem(b_md, engine, b.data_ptr());
  dnnl::memory out_mem(plain_md(out), engine, out.data_ptr());
  dnnl::memory wei_mem = b_mem;
  if (pd.weights_desc() != b_md) {
    wei_mem = dnnl::memory(pd.weights_desc(), engine);
    dnnl::reorder(b_mem, wei_mem).execute(stream, b_mem, wei_mem);
  }
  state.SetLabel(pd.impl_info_str());
  dnnl::matmul prim(pd);
  const std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, out_mem}};
  prim.execute(stream, args);  // first touch of the output and of oneDNN's buffers
  stream.wait();
  for (auto _ : state) {
    prim.execute(stream, args);
    stream.wait();
  }
  set_rate(state, c);
}

enum Variant { kLoom, kKernel, kDirect, kDirectAny };
const char* kVariants[] = {"loom", "kernel", "direct", "direct_any_weights"};

std::string bench_name(const GemmCase& c, DType dtype, Variant variant) {
  return std::string(c.name) + "/" + loom::dtype_name(dtype) + "/" + kVariants[variant];
}

void register_all() {
  for (const GemmCase& c : kCases)
    for (DType dtype : {DType::F32, DType::BF16}) {
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
class RatioReporter : public benchmark::ConsoleReporter {
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

  void print_ratios() const {
    const char* row = "%-26s %-5s %9s %9s %9s %8s %8s %9s %10s\n";
    std::printf("\nGFLOP/s (best run); ratio = loom / direct oneDNN call with the same layouts\n");
    std::printf(row, "case", "dtype", "loom", "kernel", "direct", "ratio", "kernel/", "direct",
                "loom /");
    std::printf(row, "", "", "(op)", "(backend)", "", "", "direct", "any-W", "direct f32");
    for (const GemmCase& c : kCases)
      for (DType dtype : {DType::F32, DType::BF16}) {
        const double loom = get(bench_name(c, dtype, kLoom));
        const double kernel = get(bench_name(c, dtype, kKernel));
        const double direct = get(bench_name(c, dtype, kDirect));
        const double any = get(bench_name(c, dtype, kDirectAny));
        const double direct_f32 = get(bench_name(c, DType::F32, kDirect));
        if (loom == 0 && kernel == 0 && direct == 0) continue;  // filtered out
        std::printf(row, c.name, loom::dtype_name(dtype), fmt(loom).c_str(), fmt(kernel).c_str(),
                    fmt(direct).c_str(), ratio(loom, direct).c_str(), ratio(kernel, direct).c_str(),
                    fmt(any).c_str(), ratio(loom, direct_f32).c_str());
      }
    std::printf(
        "n/a: oneDNN has no kernel for that dtype on this CPU (or the case was filtered "
        "out)\n");
  }

 private:
  double get(const std::string& name) const {
    auto it = best_.find(name);
    return it == best_.end() ? 0.0 : it->second;
  }
  static std::string fmt(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return x > 0 ? buf : "n/a";
  }
  static std::string ratio(double num, double den) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", num / den);
    return num > 0 && den > 0 ? buf : "n/a";
  }
  std::map<std::string, double> best_;
};

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
