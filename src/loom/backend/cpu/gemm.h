// GEMMs on raw strided buffers for kernels that multiply inside their own loops (attention):
// the same oneDNN plans, caches and layout rules as CpuBackend::matmul (matmul.cpp).
#pragma once
#include <cstdint>

#include "loom/core/dtype.h"

namespace loom::cpu {

// One operand as a stack of matrices (batch, rows, cols); strides in elements.
struct MatrixView {
  char* data = nullptr;
  DType dtype = DType::F32;
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t bs = 0, rs = 0, cs = 0;
};

// out = a @ b (f32 or bf16 operands; out f32 or the operands' dtype; a batch of 1 broadcasts).
// Inside an OpenMP parallel region it runs sequentially on the calling thread. out must be
// row-major in its last two dims.
void gemm(MatrixView a, MatrixView b, MatrixView out);

// Whether oneDNN has a native bf16 matmul on this CPU (AVX512-BF16 or AMX); elsewhere oneDNN
// has none or only a naive reference loop, and gemm widens bf16 operands to f32 instead.
bool native_bf16_gemm();

}  // namespace loom::cpu
