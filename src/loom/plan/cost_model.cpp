#include "loom/plan/cost_model.h"

#include <algorithm>
#include <chrono>

#include "loom/backend/backend.h"
#include "loom/core/rng.h"
#include "loom/ops/creation.h"
#include "loom/plan/hardware_peak.h"

namespace loom::plan {

double block_flops_per_token(double C, double mlp_hidden, double qkv_out, double keys) {
  return 2.0 * C * qkv_out + 2.0 * C * C + 2.0 * 2.0 * C * mlp_hidden + 4.0 * keys * C;
}

double train_step_flops(const StepShape& s) {
  return 3.0 * s.forward_flops * double(s.batch);
}

MemoryBound memory_lower_bound(const StepShape& s, int processes, int64_t tp, int64_t pp,
                               int64_t dp_shard, int zero_stage) {
  MemoryBound m;
  m.local_batch = double(s.batch) / double(std::max(processes, 1));
  m.parameters = s.parameters;
  const double split = m.parameters / double(std::max<int64_t>(tp * pp, 1));
  const double shards = double(std::max<int64_t>(dp_shard, 1));
  m.state_bytes = 4 * split / (zero_stage >= 3 ? shards : 1) +  // weights
                  4 * split / (zero_stage >= 2 ? shards : 1) +  // gradients
                  8 * split / (zero_stage >= 1 ? shards : 1);   // AdamW moments
  m.batch_bytes =
      m.local_batch * (s.sample_bytes + s.split_sample_bytes / double(std::max<int64_t>(tp, 1)));
  return m;
}

namespace {

// GFLOP/s of the best of five timed n^3 products (after one warm-up), and the slowest one's
// seconds.
struct Ceiling {
  double gflops = 0, slowest_s = 0;
};

Ceiling time_square_gemm(DType dtype, int64_t n, Device device) {
  // Square products large enough to reach the kernel's steady state; the best of a few runs,
  // so a moment of contention on a shared machine does not lower the ceiling. The operands
  // count as MemCategory::Other, so a training run's activation peak does not include them.
  Backend& backend = backend_for(device);
  auto operand = [&](const char* name) {
    Tensor t = Tensor::empty({1, n, n}, dtype, device, MemCategory::Other);
    fill_uniform(t, RngKey{0, "bench.ceiling", name}, 0, -1.0f, 1.0f);
    return t;
  };
  const Tensor a = operand("a"), b = operand("b");
  const Tensor c = Tensor::empty({1, n, n}, dtype, device, MemCategory::Other);
  // A device queues the product: reading one element back waits for it.
  const Tensor one = Tensor::empty({1}, dtype, cpu_device(), MemCategory::Other);
  auto finish = [&] {
    if (device != cpu_device()) backend.copy(c.as_strided({1}, {1}, 0), one);
  };
  Ceiling r;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    backend.matmul(a, b, Tensor(), c);
    finish();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep == 0) continue;
    r.gflops = std::max(r.gflops, 2.0 * double(n) * double(n) * double(n) / s / 1e9);
    r.slowest_s = std::max(r.slowest_s, s);
  }
  return r;
}

}  // namespace

double measure_gemm_ceiling(DType dtype, int64_t n, Device device) {
  // On the CPU, rows of a multiple of 4 KB (n = 2048) are copied by the GEMM to a padded stride
  // first, which oneDNN 3.2 multiplies on its gemm:jit kernels; n - 8 stays dense and takes
  // brgemm, the kernel most model products run on (up to 15% faster with AMX). The ceiling is
  // the better of the two.
  if (device == cpu_device())
    return std::max(time_square_gemm(dtype, n, device).gflops,
                    time_square_gemm(dtype, n - 8, device).gflops);
  // A GPU reaches its rate only on products large enough to fill it: n doubles from the one
  // asked (up to 8192) while a product takes under 10 ms, and the best rate seen is kept.
  double best = 0;
  for (;; n *= 2) {
    const Ceiling c = time_square_gemm(dtype, n, device);
    best = std::max(best, c.gflops);
    if (c.slowest_s > 0.01 || n >= 8192) return best;
  }
}

MfuYardsticks measure_mfu_yardsticks(DType dtype, Device device) {
  const bool host = device == cpu_device();
  return {measure_gemm_ceiling(dtype, host ? 1024 : 256, device),
          host ? measure_hardware_peak(dtype).gflops : 0};
}

}  // namespace loom::plan
