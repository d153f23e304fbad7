// Quantising a GEMM operand the way a low-precision recipe prescribes, and the GEMM on such
// operands, emulated: the operand comes back dequantised (each code times its scales, rounded
// to f32: what a tensor core multiplies), so an f32 GEMM on it reproduces the low-precision
// product with wider accumulation. The recipes of train.precision will be built from these.
#pragma once
#include <cstdint>

#include "loom/precision/block_scaling.h"
#include "loom/precision/formats.h"

namespace loom::precision {

// How a (rows, cols) row-major operand is scaled before the cast to its element format. The
// rows run along the GEMM's reduction dimension, so tiles and blocks cut it as hardware does.
enum class Scaling : uint8_t {
  Tensor,       // one f32 scale for the whole operand: element max / amax (current or delayed)
  Tile1x128,    // one f32 scale per 128 consecutive values of a row (DeepSeek-V3 activations)
  Block128,     // one f32 scale per 128 x 128 block (DeepSeek-V3 weights)
  Mx,           // one E8M0 scale per 32 consecutive values of a row (OCP MX v1.0)
  Nvfp4,        // one E4M3 scale per 16 consecutive values of a row, under the tensor scale
  Nvfp4Square,  // one E4M3 scale per 16 x 16 block (NVFP4 weights: the same in both directions)
};
const char* scaling_name(Scaling s);

struct QuantizeStats {
  int64_t values = 0;
  int64_t saturated = 0;  // beyond what rounds to a finite value (clamped to the largest)
  int64_t flushed = 0;    // non-zero values that became zero
  float amax = 0;         // the operand's largest finite magnitude, measured (delayed scaling's)
};

struct QuantizeOptions {
  const StochasticRounding* sr = nullptr;  // null: round to nearest even
  float amax = -1;  // Scaling::Tensor and the NVFP4 tensor scale: < 0 measures it (current
                    // scaling); a given one (delayed scaling: from the amax history) is used
  // The tile or block edge; 0: the scaling's own (128, 128, 32, 16, 16). Tile1x128 and Block128
  // take powers of two from 16 to 1024 (DeepSeek-V3's 128 by default); MX and NVFP4 only
  // their format's block.
  int64_t block = 0;
};

// x (rows, cols) -> out (rows, cols): quantised and dequantised in place of the low-precision
// operand. Checks that the element format fits the scaling (fp8 for Tensor / Tile1x128 /
// Block128, any MX element for Mx, E2M1 for NVFP4) and the block size. Tiles at the right and
// bottom edges may be partial: they quantise as the operand padded with zeros would (what GPU
// kernels do with a reduction dimension that is not a multiple of the block). A NaN or
// infinity makes every value of its group NaN (tensorwise: of the operand). Threaded (OpenMP).
QuantizeStats fake_quantize(const float* x, int64_t rows, int64_t cols, Element element,
                            Scaling scaling, float* out, const QuantizeOptions& options = {});

// x (rows, cols), cols a multiple of 16, rotated in place: each run of 16 values of a row
// becomes v diag(signs) H / 4 with H the 16 x 16 Sylvester-Hadamard matrix, an orthogonal map,
// so two operands rotated with the same signs keep their product a b^T (up to rounding). It
// spreads an outlier over its block before quantisation (NVFP4's random Hadamard transform).
void hadamard16(float* x, int64_t rows, int64_t cols, const float signs[16]);

// c (M, N) = a (M, K) b (N, K)^T with f32 accumulation, on operands fake_quantize produced.
void gemm_nt(const float* a, const float* b, int64_t M, int64_t N, int64_t K, float* c);

}  // namespace loom::precision
