// Mamba-2's state-space duality (SSD) scan, chunked (Dao & Gu 2024), as plain differentiable
// ops: GEMMs within chunks of `chunk` steps, a short sequential pass carrying the state from
// one chunk to the next. Its cost is linear in T (T / chunk chunks of fixed size); its backward
// is its ops' backward, and it runs on every backend those ops run on.
#pragma once
#include "loom/core/tensor.h"

namespace loom::nn {

// The recurrence it computes, per batch row b and head h (state S (P, N), S_0 = initial_state):
//   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T,      y_t = S_t C_t
// x (B, T, H, P); dt (B, T, H) positive step sizes; A (H) negative decay rates; Bm, Cm
// (B, T, G, N), head h reading group h / (H / G); initial_state (B, H, P, N) or undefined
// (zeros). All f32; computed in f32 whatever autocast says (the decays are sums of exponents).
struct SsdResult {
  Tensor y;            // (B, T, H, P)
  Tensor final_state;  // (B, H, P, N): S_T, for the next piece of the sequence (decoding)
};
SsdResult ssd_scan(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                   const Tensor& Cm, int64_t chunk, const Tensor& initial_state = Tensor());

}  // namespace loom::nn
