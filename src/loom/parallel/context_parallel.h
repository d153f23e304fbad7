// Context (sequence) parallelism for attention: each rank of `group` (P ranks) holds one
// contiguous chunk of the sequence -- rank r positions [r T/P, (r+1) T/P) -- of q, k and v.
#pragma once
#include "loom/parallel/functional.h"

namespace loom::parallel {

// Ulysses (Jacobs et al. 2023): an all-to-all trades the sequence split for a head split, each
// rank attends over the whole sequence with H/P of the heads, and a second all-to-all trades
// back. q (B, H, T/P, D), k/v (B, Hkv, T/P, D) with H and Hkv multiples of P (GQA keeps its
// grouping: rank j gets query heads j H/P.. and key/value heads j Hkv/P..). Returns this
// rank's chunk of the output, (B, H, T/P, D). Causal masking uses global positions.
Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         const GroupPtr& group);

}  // namespace loom::parallel
