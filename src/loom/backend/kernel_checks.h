// Argument checks every backend's kernels share, with one message each.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// a and out have one shape and dtype (elementwise operands).
void check_same_layout(const char* kernel, const Tensor& a, const Tensor& out);
// Contiguous f32 tensors of one size (optimizer buffers).
void check_f32_like(const char* kernel, const Tensor& a, const Tensor& b);

// out(b) = a(b) @ b(b): 3-D operands whose dims fit, batch 1 broadcasting, one operand dtype.
struct MatmulDims {
  int64_t batch, m, k, n;
};
MatmulDims check_matmul(const Tensor& a, const Tensor& b, const Tensor& out);

// An attention operand (B, H, S, D) of this shape and dtype with contiguous rows of D.
void check_attention_rows(const Tensor& t, const char* name, const Shape& shape, DType dtype);

}  // namespace loom
