// Peak multiply-add rate and clock, measured by register-only loops (hardware_peak.h).
#include "loom/plan/hardware_peak.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace loom::plan {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAccumulators = 12;  // > FMA latency x ports on the CPUs seen, so the ports stay full
constexpr int64_t kIterations = 1 << 22;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Each loop returns FLOPs done; its result is folded into `sink` so nothing is optimised away.
// The multiplier below one and the small addend keep the accumulators near a fixed point:
// no overflow, no subnormals (which would slow some CPUs down).
__attribute__((target("avx512f"))) double fma_avx512(float* sink) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  for (float v : lanes) *sink += v;
  return double(kIterations) * kAccumulators * 16 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) double dot_avx512_bf16(float* sink) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(float(i));
  // Pairs of bf16 products summed into each f32 lane: 16 lanes x 2 products x (mul + add).
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  for (float v : lanes) *sink += v;
  return double(kIterations) * kAccumulators * 16 * 4;
}

__attribute__((target("avx2,fma"))) double fma_avx2(float* sink) {
  __m256 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  for (float v : lanes) *sink += v;
  return double(kIterations) * kAccumulators * 8 * 2;
}

// AMX: Linux hands out the tile registers' state only to a process that asks for it.
bool amx_permitted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The tile configuration (palette 1): eight tiles of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3 accumulate (16 x 16 f32 each), 4-5 hold A (16 x 32 bf16), 6-7 B (32 x 16 bf16 in
// pairs): each TDPBF16PS is 16 x 16 x 32 multiply-adds, four independent ones per iteration.
__attribute__((target("amx-tile,amx-bf16"))) double dot_amx_bf16(float* sink) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.colsb[t] = 64;
  _tile_loadconfig(&config);
  alignas(64) uint16_t operand[16 * 32];
  std::fill_n(operand, 16 * 32, uint16_t(0x3a83));  // bf16 1e-3: sums stay far from overflow
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  const int64_t iterations = kIterations / 16;  // one TDPBF16PS takes about 16 cycles
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  for (float v : out) *sink += v;
  return double(iterations) * 4 * 16 * 16 * 32 * 2;
}

// Adds that each wait for the one before: one per cycle on every x86 core of the last decade.
// Register to register: recent Intel cores fold chains of immediate adds at rename (seen: a
// Xeon with AMX retired four `add $1` per cycle, reading as a 13 GHz clock).
double dependent_adds(uint64_t* sink) {
  uint64_t x = *sink;
  const uint64_t one = 1;
  for (int64_t it = 0; it < kIterations; ++it)
    asm volatile(
        "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
        "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
        : "+r"(x)
        : "r"(one));
  *sink = x;
  return double(kIterations) * 8;
}

}  // namespace

bool has_amx_bf16() {  // CPUID leaf 7, EDX bit 22
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
}

HardwarePeak measure_hardware_peak(DType dtype) {
  HardwarePeak peak;
  double (*loop)(float*) = nullptr;
  if (dtype == DType::BF16 && has_amx_bf16()) {  // oneDNN's bf16 GEMMs run on the tile unit
    if (!amx_permitted()) {
      peak.instruction = "amx (tile state refused by the kernel; not measured)";
      return peak;
    }
    loop = dot_amx_bf16, peak.instruction = "amx_bf16 tile dot";
  } else if (dtype == DType::BF16 && __builtin_cpu_supports("avx512bf16")) {
    loop = dot_avx512_bf16, peak.instruction = "avx512_bf16 dot";
  } else if (__builtin_cpu_supports("avx512f")) {
    loop = fma_avx512, peak.instruction = "avx512 fma";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    loop = fma_avx2, peak.instruction = "avx2 fma";
  } else {
    peak.instruction = "none (no FMA)";
    return peak;
  }
  peak.threads = omp_get_max_threads();
  std::vector<double> gflops(size_t(peak.threads)), ghz(size_t(peak.threads));
  float fsink = 0;
  uint64_t isink = 0;
#pragma omp parallel num_threads(peak.threads) reduction(+ : fsink, isink)
  {
    const int t = omp_get_thread_num();
    loop(&fsink);  // warm-up: wakes the wide units, which some CPUs power down when idle
    // The best of a few runs of each, all threads at once: a moment of contention on a
    // shared machine lowers one run, not the figure.
    for (int rep = 0; rep < 3; ++rep) {
#pragma omp barrier
      auto start = Clock::now();
      const double flops = loop(&fsink);
      gflops[size_t(t)] = std::max(gflops[size_t(t)], flops / seconds_since(start) / 1e9);
#pragma omp barrier
      start = Clock::now();
      const double cycles = dependent_adds(&isink);
      ghz[size_t(t)] = std::max(ghz[size_t(t)], cycles / seconds_since(start) / 1e9);
    }
  }
  volatile float keep_f = fsink;  // the loops' results are used, so they are not removed
  volatile uint64_t keep_i = isink;
  (void)keep_f, (void)keep_i;
  for (int t = 0; t < peak.threads; ++t) {
    peak.gflops += gflops[size_t(t)];
    peak.clock_ghz += ghz[size_t(t)] / peak.threads;
  }
  peak.flops_per_cycle = peak.gflops / (peak.threads * peak.clock_ghz);
  return peak;
}

}  // namespace loom::plan
