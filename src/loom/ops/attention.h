// Fused scaled-dot-product attention (differentiable; flash-style kernels, no S x S matrix).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D), Hq a multiple of Hkv (GQA/MQA).
// mask: optional additive f32 mask broadcastable to (B, Hq, Sq, Skv) (e.g. (Sq, Skv)).
// causal: query i attends to keys j <= i + (Skv - Sq); window > 0 (causal only): to the last
// `window` of them, j > i + (Skv - Sq) - window (Mistral's sliding window), the keys outside
// never computed. scale <= 0 means 1/sqrt(D).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = Tensor(), bool causal = false,
                                    float scale = -1.0f, int64_t window = 0);

}  // namespace loom
