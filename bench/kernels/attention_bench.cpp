// Fused flash-style attention (forward + backward) against the naive composition of Loom ops
// that materialises the S x S scores: matmul(q, k^T) * scale + causal mask -> softmax ->
// matmul(p, v), backward through autograd. Both run in the same process on the same inputs.
// Prints per sequence length: median time of forward+backward, and the peak extra memory
// (allocator peak above the inputs, kernel scratch included) — linear in S for the fused
// kernel, quadratic for the composition.
//
//   ./build/attention_bench [--reps N] [--max-seq S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  Tensor scores = loom::mul_scalar(loom::matmul(q3, loom::transpose(k3, 1, 2)), 1.0 / std::sqrt(double(D)));
  Tensor p = loom::softmax(loom::add(scores, causal_mask));
  Tensor out = loom::reshape(loom::matmul(p, v3), {B, H, S, D});
  loom::backward(out, in.gout);
}

struct Measure {
  double median_ms;
  double peak_extra_mb;
};

template <typename Fn>
Measure measure(int reps, Fn fn) {
  auto& alloc = loom::host_allocator();
  fn();  // warm-up: primitive creation, allocator cache
  alloc.reset_peak();
  const int64_t base = alloc.stats().live_total;
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], double(alloc.stats().peak_total - base) / 1e6};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int64_t max_seq = 2048;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-seq")) max_seq = std::atoll(argv[i + 1]);
  }
  std::printf("attention forward+backward, B=%lld H=%lld D=%lld, causal, f32, %d reps (median)\n",
              (long long)B, (long long)H, (long long)D, reps);
  std::printf("%6s  %12s  %12s  %8s  %16s  %16s\n", "S", "fused ms", "naive ms", "speedup",
              "fused extra MB", "naive extra MB");
  for (int64_t S = 256; S <= max_seq; S *= 2) {
    Inputs in = make_inputs(S);
    std::vector<float> mask(size_t(S * S));
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) mask[size_t(i * S + j)] = j > i ? -INFINITY : 0.0f;
    Tensor causal_mask = loom::from_vector(mask, {S, S});
    const Measure fused = measure(reps, [&] { run_fused(in); });
    const Measure naive = measure(reps, [&] { run_naive(in, causal_mask); });
    std::printf("%6lld  %12.1f  %12.1f  %7.2fx  %16.1f  %16.1f\n", (long long)S, fused.median_ms,
                naive.median_ms, naive.median_ms / fused.median_ms, fused.peak_extra_mb,
                naive.peak_extra_mb);
    std::fflush(stdout);
  }
  return 0;
}
