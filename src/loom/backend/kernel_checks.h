// Argument checks every backend's kernels share, with one message each.
#pragma once
#include "loom/backend/block_scaling.h"
#include "loom/backend/wire_quantize.h"
#include "loom/core/tensor.h"

namespace loom {

// a and out have one shape and dtype (elementwise operands).
void check_same_layout(const char* kernel, const Tensor& a, const Tensor& out);
// Contiguous f32 tensors of one size (optimizer buffers).
void check_f32_like(const char* kernel, const Tensor& a, const Tensor& b);

// reduce_rows: contiguous x (rows, n) and an output of `rows` elements in its dtype.
void check_reduce_rows(const Tensor& x, const Tensor& out);
// gelu_bias_backward: (rows, n) pre/gout of one dtype and gpre of theirs (or bf16 from f32),
// with contiguous rows, and a bias gradient (n) in pre's dtype when defined.
void check_gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                              const Tensor& gbias);
// cast_with_column_sums: x (rows, n) f32 and out bf16 with contiguous rows, sums (n) f32.
void check_cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums);

// out(b) = a(b) @ b(b): 3-D operands whose dims fit, batch 1 broadcasting, one operand dtype.
struct MatmulDims {
  int64_t batch, m, k, n;
};
MatmulDims check_matmul(const Tensor& a, const Tensor& b, const Tensor& out);

// fp8_quantize's and fp8_matmul's operands (backend.h). The first returns whether out is E4M3.
bool check_fp8_quantize(const Tensor& x, const Tensor& out, const Tensor& inv_scale,
                        const Tensor& stats);
void check_fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                      const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out);
// block_quantize's and hadamard16's operands (backend.h).
void check_block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                          const Tensor& stats);
void check_hadamard16(const Tensor& x, const Tensor& out);
// wire_encode's and wire_decode's (backend.h): values (n) f32 and bytes (wire_bytes) u8.
void check_wire(const char* kernel, const Tensor& values, const WireQuant& q, const Tensor& bytes);

// An attention operand (B, H, S, D) of this shape and dtype with contiguous rows of D.
void check_attention_rows(const Tensor& t, const char* name, const Shape& shape, DType dtype);

// ssm_scan_forward's operands (backend.h): every one contiguous f32 in its shape, every > 0
// (state and y only when defined: the backward has none).
struct SsmScanDims {
  int64_t batch, steps, heads, head_dim, groups, state, chunks;
};
SsmScanDims check_ssm_scan(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                           const Tensor& Cm, const Tensor& state, const Tensor& y,
                           const Tensor& checkpoints, int64_t every);
// ssm_scan_backward's gradients, for those dims.
void check_ssm_scan_gradients(const SsmScanDims& d, const Tensor& dy, const Tensor& dstate,
                              const Tensor& dx, const Tensor& ddt, const Tensor& dA,
                              const Tensor& dB, const Tensor& dC);

}  // namespace loom
