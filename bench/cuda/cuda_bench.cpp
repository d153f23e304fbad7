// Training steps of the standard models on the GPU (the CUDA backend): the device check's
// benchmark (scripts/device_check.sh). Per config and precision (bf16, fp8_tensorwise: the
// blocks' linear layers on fp8 tensor cores, f32): the median step, tokens (or images) per
// second, and MFU against the measured bf16 GEMM ceiling of this GPU and against the H200's
// dense bf16 peak (989.4 TFLOP/s, NVIDIA's datasheet figure without sparsity).
//   loom_cuda_bench NAME:BATCH[:SEQ]...   e.g. gpt2_124m:16:1024 dit_small:256
//   loom_cuda_bench --one NAME:BATCH[:SEQ] PRECISION
//       one step and nothing else (no warm-up, no ceiling): what a kernel profiler should see
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/bench/step_bench.h"
#include "loom/ops/creation.h"
#include "loom/ops/matmul.h"
#include "loom/ops/shape.h"
#include "loom/plan/cost_model.h"

namespace {

using namespace loom;

const Device kCuda{DeviceType::CUDA, 0};
constexpr double kH200DenseBf16Gflops = 989.4e3;

// Waits for the GPU: a one-element read back.
void sync(const Tensor& t) {
  Tensor one = Tensor::empty({1}, t.dtype());
  backend_for(kCuda).copy(reshape(narrow(reshape(t, {-1}), 0, 0, 1), {1}), one);
}

// The bf16 GEMM ceiling: an 8192^3 product through the backend, best of 10 after 3 warm-ups.
double gemm_ceiling_gflops() {
  const int64_t n = 8192;
  Tensor a = randn({1, n, n}, RngKey{1, "ceiling", "a"}, DType::BF16, kCuda);
  Tensor b = randn({1, n, n}, RngKey{1, "ceiling", "b"}, DType::BF16, kCuda);
  double best = 1e30;
  for (int i = 0; i < 13; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Tensor c = matmul(a, b);
    sync(c);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= 3) best = std::min(best, s);
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

// NAME:BATCH[:SEQ] as the step it names.
bench::BenchModel step_shape(const std::string& arg) {
  const size_t c1 = arg.find(':'), c2 = arg.find(':', c1 + 1);
  LOOM_CHECK(c1 != std::string::npos) << "expected NAME:BATCH[:SEQ], got '" << arg << "'";
  const bench::BenchModel standard = bench::bench_model(arg.substr(0, c1));
  const int64_t batch = std::stoll(arg.substr(c1 + 1, c2 - c1 - 1));
  const int64_t seq =
      c2 == std::string::npos ? standard.shape.items_per_sample : std::stoll(arg.substr(c2 + 1));
  return bench::bench_model(standard.config, batch, seq);
}

}  // namespace

int main(int argc, char** argv) {
  const bool one = argc == 4 && std::string(argv[1]) == "--one";
  if (argc < 2 || (std::string(argv[1]) == "--one" && !one)) {
    std::fprintf(stderr,
                 "usage: loom_cuda_bench NAME:BATCH[:SEQ]...\n"
                 "       loom_cuda_bench --one NAME:BATCH[:SEQ] PRECISION\n");
    return 2;
  }
  try {
    if (one) {
      bench::BenchOptions options;
      options.precision = argv[3];
      options.device = kCuda;
      options.warmup = 0;
      options.steps = 1;
      const bench::BenchResult r = bench::run_bench(step_shape(argv[2]), options, 0);
      std::printf("%s %s: one step, %.2f ms\n", argv[2], argv[3], r.median_ms);
      return 0;
    }
    const double ceiling = gemm_ceiling_gflops();
    std::printf("bf16 GEMM ceiling (8192^3, cuBLASLt): %.0f GFLOP/s; H200 dense bf16 peak %.0f\n",
                ceiling, kH200DenseBf16Gflops);
    std::printf("%-12s %6s %5s %-5s %10s %12s %9s %8s %8s\n", "config", "batch", "seq", "prec",
                "median ms", "items/s", "TFLOP/s", "MFU-gemm", "MFU-peak");
    for (int i = 1; i < argc; ++i) {
      const bench::BenchModel spec = step_shape(argv[i]);
      const int64_t batch = spec.shape.batch, seq = spec.shape.items_per_sample;
      for (const char* precision : {"bf16", "fp8_tensorwise", "f32"}) {
        bench::BenchOptions options;
        options.precision = precision;
        options.device = kCuda;
        options.warmup = 3;
        options.steps = 10;
        const bench::BenchResult r = bench::run_bench(spec, options, ceiling);
        std::printf("%-12s %6lld %5lld %-5s %10.2f %12.0f %9.1f %7.1f%% %7.1f%%\n",
                    spec.shape.name.c_str(), (long long)batch, (long long)seq, precision,
                    r.median_ms, r.items_per_s, r.gflops / 1e3, 100.0 * r.gflops / ceiling,
                    100.0 * r.gflops / kH200DenseBf16Gflops);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
