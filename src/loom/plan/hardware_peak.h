// The machine's arithmetic peak, the second yardstick for MFU beside the GEMM ceiling: what the
// vector units can do when nothing else (memory, packing, a library's choices) is in the way.
#pragma once
#include <string>

#include "loom/core/dtype.h"

namespace loom::plan {

// Measured, not looked up: every OpenMP thread of the caller runs a loop of independent
// register-only multiply-adds (AVX-512 or AVX2 FMA for f32; AVX512-BF16 dot products for bf16,
// else the f32 FMA loop, since that is what bf16 GEMMs run on there) and, separately, a chain of
// dependent integer adds, which retire one per cycle and so give the clock. bf16 on a CPU with
// AMX is not measured (gflops 0): its GEMMs run on the tile unit, which no vector loop shows.
// A CPU without FMA has gflops 0 too.
struct HardwarePeak {
  std::string instruction;     // what the loop ran: "avx512 fma", "avx512_bf16 dot", "avx2 fma"
  double gflops = 0;           // all threads together
  double clock_ghz = 0;        // mean over the threads, measured while they all ran
  double flops_per_cycle = 0;  // per thread: gflops / (threads x clock)
  int threads = 0;
};

HardwarePeak measure_hardware_peak(DType dtype);

}  // namespace loom::plan
