// One mixture-of-experts layer (nn::MoE: router, dropless grouped GEMMs, combine) against the
// dense SwiGLU MLP with the same active parameters per token (hidden top_k x the expert's),
// forward + backward on the same tokens, alternating A B A B in one run; prints the best time
// of each, their ratio and the expert loads of the timed routing.
//
//   ./build/moe_bench [--tokens N] [--width C] [--experts E] [--top-k K] [--hidden H]
//                     [--rounds R] [--bf16]
//
// Defaults: gpt_small's step (16 x 256 tokens, width 384) with 8 experts, top 2, hidden 512
// (the dense MLP: 1024, Llama's 8/3 x 384).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "loom/nn/moe.h"
#include "loom/ops/ops.h"

namespace {

using loom::Tensor;
using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 4096, width = 384, experts = 8, top_k = 2, hidden = 512, rounds = 10;
  bool bf16 = false;
  const std::pair<const char*, int64_t*> options[] = {
      {"--tokens", &tokens}, {"--width", &width},   {"--experts", &experts},
      {"--top-k", &top_k},   {"--hidden", &hidden}, {"--rounds", &rounds}};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bf16")) {
      bf16 = true;
      continue;
    }
    int64_t* target = nullptr;
    for (const auto& [name, value] : options)
      if (!std::strcmp(argv[i], name)) target = value;
    if (target == nullptr) {
      std::fprintf(stderr, "unknown argument %s (see the header of bench/kernels/moe_bench.cpp)\n",
                   argv[i]);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", argv[i]);
      return 2;
    }
    *target = std::atoll(argv[++i]);
  }
  loom::nn::MoeConfig c;
  c.experts = experts;
  c.top_k = top_k;
  c.hidden = hidden;
  c.aux_loss = 0.01;
  c.z_loss = 0.001;
  loom::nn::MoE moe(width, c);
  moe.init_parameters(1);
  loom::nn::SwiGLU dense(width, top_k * hidden);
  dense.init_parameters(1);
  const Tensor x = loom::randn({tokens, width}, loom::RngKey{1, "moe_bench", "x"});
  const Tensor gout = loom::randn({tokens, width}, loom::RngKey{1, "moe_bench", "gout"});

  auto step = [&](const loom::nn::Module& m, bool is_moe) {
    loom::AutocastGuard autocast(bf16 ? loom::DType::BF16 : loom::DType::F32);
    Tensor in = x.detach();
    in.set_requires_grad(true);
    const Tensor y = is_moe ? static_cast<const loom::nn::MoE&>(m).forward(in)
                            : static_cast<const loom::nn::SwiGLU&>(m).forward(in);
    loom::backward(y, gout);
    for (Tensor p : m.parameters()) p.set_grad(Tensor());
  };
  // Warm-up: the GEMM kernels of every shape, the allocator's cache.
  for (int w = 0; w < 3; ++w) {
    step(moe, true);
    step(dense, false);
  }
  double best_moe = 1e30, best_dense = 1e30;
  for (int64_t r = 0; r < rounds; ++r) {
    moe.reset_stats();
    best_moe = std::min(best_moe, seconds_of([&] { step(moe, true); }));
    best_dense = std::min(best_dense, seconds_of([&] { step(dense, false); }));
  }
  const auto& load = moe.stats().load;
  const double mean = double(tokens * top_k) / double(experts);
  const double top = double(*std::max_element(load.begin(), load.end()));
  std::printf(
      "moe_bench: %lld tokens, width %lld, %lld experts top %lld of hidden %lld vs dense "
      "SwiGLU hidden %lld, %s, %d threads\n",
      (long long)tokens, (long long)width, (long long)experts, (long long)top_k, (long long)hidden,
      (long long)(top_k * hidden), bf16 ? "bf16 autocast" : "f32", omp_get_max_threads());
  std::printf("  expert loads (tokens):");
  for (int64_t n : load) std::printf(" %lld", (long long)n);
  std::printf("  (max / mean %.2f)\n", top / mean);
  std::printf(
      "  forward + backward, best of %lld alternating rounds: MoE %.2f ms, dense %.2f ms, "
      "dense / MoE %.2fx\n",
      (long long)rounds, 1e3 * best_moe, 1e3 * best_dense, best_dense / best_moe);
  return 0;
}
