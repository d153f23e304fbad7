// The machine's arithmetic peak, the second yardstick for MFU beside the GEMM ceiling: what the
// vector units can do when nothing else (memory, packing, a library's choices) is in the way.
#pragma once
#include <string>

#include "loom/core/dtype.h"

namespace loom::plan {

// Measured, not looked up: every OpenMP thread of the caller runs a loop of independent
// register-only multiply-adds (AVX-512 or AVX2 FMA for f32; for bf16 AMX tile dot products
// where the CPU has AMX, since oneDNN's bf16 GEMMs run on the tile unit there, else AVX512-BF16
// dot products, else the f32 FMA loop, since that is what bf16 GEMMs run on then) and,
// separately, a chain of dependent integer adds, which retire one per cycle and so give the
// clock. A CPU without FMA has gflops 0, as has AMX where the kernel refuses its tile state.
struct HardwarePeak {
  std::string instruction;     // what the loop ran: "avx512 fma", "amx_bf16 tile dot", ...
  double gflops = 0;           // all threads together
  double clock_ghz = 0;        // mean over the threads, measured while they all ran
  double flops_per_cycle = 0;  // per thread: gflops / (threads x clock)
  int threads = 0;
};

HardwarePeak measure_hardware_peak(DType dtype);

// Whether the CPU has AMX tiles for bf16 (CPUID leaf 7, EDX bit 22; the kernel may still refuse
// their state to a process).
bool has_amx_bf16();

}  // namespace loom::plan
