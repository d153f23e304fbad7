// Fused flash-style attention (forward + backward) against the naive composition of Loom ops
// that materialises the S x S scores: matmul(q, k^T) * scale + causal mask -> softmax ->
// matmul(p, v), backward through autograd. Both run in the same process on the same inputs.
// Google Benchmark cases per sequence length report the time of forward+backward and a
// counter extra_MB: the allocator's peak above the inputs, kernel scratch included — linear
// in S for the fused kernel, quadratic for the composition. A table of speedups (naive time /
// fused time, same run) follows.
//
//   ./build/attention_bench [--benchmark_filter=...] [--max-seq S]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "loom/ops/ops.h"

namespace {

using loom::Tensor;

constexpr int64_t B = 4, H = 12, D = 64;

struct Inputs {
  Tensor q, k, v, gout;
};

Inputs make_inputs(int64_t S) {
  Inputs in;
  in.q = loom::randn({B, H, S, D}, loom::RngKey{1, "bench", "q"});
  in.k = loom::randn({B, H, S, D}, loom::RngKey{1, "bench", "k"});
  in.v = loom::randn({B, H, S, D}, loom::RngKey{1, "bench", "v"});
  in.gout = loom::randn({B, H, S, D}, loom::RngKey{1, "bench", "gout"});
  return in;
}

void run_fused(const Inputs& in) {
  Tensor q = in.q.detach(), k = in.k.detach(), v = in.v.detach();
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  v.set_requires_grad(true);
  Tensor out = loom::scaled_dot_product_attention(q, k, v, Tensor(), /*causal=*/true);
  loom::backward(out, in.gout);
}

void run_naive(const Inputs& in, const Tensor& causal_mask) {
  const int64_t S = in.q.size(2);
  Tensor q = in.q.detach(), k = in.k.detach(), v = in.v.detach();
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  v.set_requires_grad(true);
  Tensor q3 = loom::reshape(q, {B * H, S, D}), k3 = loom::reshape(k, {B * H, S, D}),
         v3 = loom::reshape(v, {B * H, S, D});
  Tensor scores =
      loom::mul_scalar(loom::matmul(q3, loom::transpose(k3, 1, 2)), 1.0 / std::sqrt(double(D)));
  Tensor p = loom::softmax(loom::add(scores, causal_mask));
  Tensor out = loom::reshape(loom::matmul(p, v3), {B, H, S, D});
  loom::backward(out, in.gout);
}

Tensor causal_mask(int64_t S) {
  std::vector<float> mask(size_t(S * S));
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) mask[size_t(i * S + j)] = j > i ? -INFINITY : 0.0f;
  return loom::from_vector(mask, {S, S});
}

// Times fn and records the allocator's peak above what was live before as extra_MB.
template <typename Fn>
void run_case(benchmark::State& state, Fn fn) {
  auto& alloc = loom::host_allocator();
  fn();  // warm-up: primitive creation, allocator cache
  alloc.reset_peak();
  const int64_t base = alloc.stats().live_total;
  for (auto _ : state) fn();
  state.counters["extra_MB"] = double(alloc.stats().peak_total - base) / 1e6;
}

void BM_fused(benchmark::State& state) {
  Inputs in = make_inputs(state.range(0));
  run_case(state, [&] { run_fused(in); });
}

void BM_naive(benchmark::State& state) {
  Inputs in = make_inputs(state.range(0));
  Tensor mask = causal_mask(state.range(0));
  run_case(state, [&] { run_naive(in, mask); });
}

// Keeps each case's time so the speedups can be printed after the run.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> seconds;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) seconds[r.benchmark_name()] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t max_seq = 2048;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--max-seq")) max_seq = std::atoll(argv[i + 1]);
  for (int64_t S = 256; S <= max_seq; S *= 2) {
    benchmark::RegisterBenchmark("attention_fused_causal", BM_fused)
        ->Arg(S)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(1.0);
    benchmark::RegisterBenchmark("attention_naive_causal", BM_naive)
        ->Arg(S)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(1.0);
  }
  benchmark::Initialize(&argc, argv);
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nforward+backward, B=%lld H=%lld D=%lld, causal, f32: naive / fused time\n",
              (long long)B, (long long)H, (long long)D);
  for (int64_t S = 256; S <= max_seq; S *= 2) {
    const std::string s = "/" + std::to_string(S) + "/min_time:1.000/real_time";
    auto f = reporter.seconds.find("attention_fused_causal" + s),
         n = reporter.seconds.find("attention_naive_causal" + s);
    if (f != reporter.seconds.end() && n != reporter.seconds.end())
      std::printf("  S=%-5lld speedup %.2fx\n", (long long)S, n->second / f->second);
  }
  return 0;
}
