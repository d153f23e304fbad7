// A Mamba-2 layer (nn::Mamba2, the chunked SSD scan) against a causal attention layer
// (nn::Attention, the fused flash-style kernel) of the same width, and the same attention with
// a sliding window of W keys (Mistral's), forward + backward on one sequence of 1k to 16k
// tokens: the SSM's and the window's time grow linearly with the length, attention's
// quadratically. All run in this process on the same input, alternating, best of `reps`.
// A second table times the scan alone (Mamba-2's 8 heads of 64 x 64 states): the backend's
// step-by-step kernel (ssm_scan, which the layer uses) against the chunked SSD form from
// composed ops (nn::ssd_scan, chunks of 64), forward + backward.
//
//   ./build/ssm_bench [--max-seq S] [--reps R] [--window W]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "loom/nn/mamba2.h"
#include "loom/nn/ssd.h"
#include "loom/ops/ops.h"

namespace {

using loom::Tensor;

constexpr int64_t kWidth = 256;

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Forward and backward of layer(x) against a fixed output gradient.
void step(const std::function<Tensor(const Tensor&)>& layer, const Tensor& x, const Tensor& g) {
  Tensor in = x.detach();
  in.set_requires_grad(true);
  loom::backward(layer(in), g);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_seq = 16384;
  int reps = 3;
  int64_t window = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--max-seq")) max_seq = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--window")) window = std::atoll(argv[i + 1]);
  }
  loom::nn::Mamba2Config mc;  // Mamba-2's defaults: N 64, P 64, expand 2 (8 heads), chunk 64
  mc.dim = kWidth;
  loom::nn::Mamba2 ssm(mc);
  ssm.init_parameters(1);
  loom::nn::AttentionConfig ac;
  ac.dim = kWidth;
  ac.heads = 4;  // head dim 64
  ac.causal = true;
  ac.rope_theta = 10000.0;
  ac.bias = false;
  loom::nn::Attention attn(ac);
  attn.init_parameters(1);
  ac.window = window;
  loom::nn::Attention windowed(ac);
  windowed.init_parameters(1);
  std::printf(
      "width %lld, batch 1; Mamba-2: state %lld, head dim %lld, %lld heads, chunk %lld; "
      "attention: %lld heads of 64, RoPE, causal, whole or a window of %lld; forward + "
      "backward, best of %d\n",
      (long long)kWidth, (long long)mc.state, (long long)mc.head_dim, (long long)mc.heads(),
      (long long)mc.chunk, (long long)ac.heads, (long long)window, reps);
  std::printf("%8s %12s %12s %12s %14s %14s %14s %10s\n", "tokens", "mamba2 ms", "attention ms",
              "window ms", "mamba2 us/tok", "attn us/tok", "window us/tok", "attn/ssm");
  for (int64_t T = 1024; T <= max_seq; T *= 2) {
    const Tensor x = loom::randn({1, T, kWidth}, loom::RngKey{2, "bench", "x"});
    const Tensor g = loom::randn({1, T, kWidth}, loom::RngKey{2, "bench", "g"});
    const Tensor positions = loom::arange(T);
    double best_ssm = 1e30, best_attn = 1e30, best_window = 1e30;
    for (int r = 0; r < reps; ++r) {  // alternating
      best_ssm = std::min(best_ssm, seconds_of([&] {
                            step([&](const Tensor& in) { return ssm.forward(in); }, x, g);
                          }));
      best_attn =
          std::min(best_attn, seconds_of([&] {
                     step([&](const Tensor& in) { return attn.forward(in, positions); }, x, g);
                   }));
      best_window =
          std::min(best_window, seconds_of([&] {
                     step([&](const Tensor& in) { return windowed.forward(in, positions); }, x, g);
                   }));
    }
    std::printf("%8lld %12.1f %12.1f %12.1f %14.2f %14.2f %14.2f %10.2f\n", (long long)T,
                best_ssm * 1e3, best_attn * 1e3, best_window * 1e3, best_ssm * 1e6 / double(T),
                best_attn * 1e6 / double(T), best_window * 1e6 / double(T), best_attn / best_ssm);
    std::fflush(stdout);
  }
  std::printf("\nthe scan alone, %lld heads, P %lld, N %lld, one group: forward + backward\n",
              (long long)mc.heads(), (long long)mc.head_dim, (long long)mc.state);
  std::printf("%8s %12s %12s %14s %14s %10s\n", "tokens", "kernel ms", "chunked ms",
              "kernel us/tok", "chunked us/tok", "chunked/kernel");
  const int64_t H = mc.heads(), P = mc.head_dim, N = mc.state;
  for (int64_t T = 1024; T <= max_seq; T *= 2) {
    auto leaf = [&](const loom::Shape& shape, const char* what, bool positive) {
      Tensor t = loom::randn(shape, loom::RngKey{3, "bench", what});
      if (positive) t = loom::mul_scalar(loom::exp(t), 0.05);
      t = t.detach();
      t.set_requires_grad(true);
      return t;
    };
    const Tensor x = leaf({1, T, H, P}, "x", false), dt = leaf({1, T, H}, "dt", true),
                 A = leaf({H}, "A", true), Bm = leaf({1, T, 1, N}, "B", false),
                 Cm = leaf({1, T, 1, N}, "C", false);
    const Tensor gy = loom::randn({1, T, H, P}, loom::RngKey{3, "bench", "g"});
    double best_kernel = 1e30, best_chunked = 1e30;
    for (int r = 0; r < reps; ++r) {  // alternating
      best_kernel =
          std::min(best_kernel, seconds_of([&] {
                     loom::backward(loom::ssm_scan(x, dt, loom::neg(A), Bm, Cm, 64).y, gy);
                   }));
      best_chunked =
          std::min(best_chunked, seconds_of([&] {
                     loom::backward(loom::nn::ssd_scan(x, dt, loom::neg(A), Bm, Cm, 64).y, gy);
                   }));
    }
    std::printf("%8lld %12.1f %12.1f %14.2f %14.2f %10.2f\n", (long long)T, best_kernel * 1e3,
                best_chunked * 1e3, best_kernel * 1e6 / double(T), best_chunked * 1e6 / double(T),
                best_chunked / best_kernel);
    std::fflush(stdout);
  }
  return 0;
}
