// bf16 attention over short sequences as batched oneDNN GEMMs (attention_gemm.cpp): the
// second CPU attention kernel beside the flash-style one (attention.cpp), which chooses it.
#pragma once
#include <cstdint>

#include "loom/backend/attention_band.h"
#include "loom/core/tensor.h"

namespace loom::cpu {

// The additive mask seen as (B, Hq, Sq, Skv) through strides; data == nullptr when absent.
struct AttentionMask {
  const float* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_i = 0, stride_j = 0;
};

// Whether the GEMM kernel takes this problem: bf16 operands, as many key/value heads as query
// heads, one batch element's scores within the budget below, and a native oneDNN bf16 matmul
// on this CPU (AVX512-BF16 or AMX; elsewhere oneDNN has at most a naive loop for bf16).
// Inputs are already validated by the caller.
bool attention_gemm_applies(const Tensor& q, const Tensor& k);

// Same contract as Backend::attention_forward / attention_backward (backend.h).
void attention_gemm_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionMask& mask, float scale, const AttentionBand& band,
                            const Tensor& out, const Tensor& lse);
void attention_gemm_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionMask& mask, float scale, const AttentionBand& band,
                             const Tensor& out, const Tensor& lse, const Tensor& gout,
                             const Tensor& gq, const Tensor& gk, const Tensor& gv);

// While one lives, attention_gemm_applies is false: tests run the same bf16 problem through
// both kernels.
class ForceFlashAttention {
 public:
  ForceFlashAttention();
  ~ForceFlashAttention();
  ForceFlashAttention(const ForceFlashAttention&) = delete;
  ForceFlashAttention& operator=(const ForceFlashAttention&) = delete;
};

}  // namespace loom::cpu
