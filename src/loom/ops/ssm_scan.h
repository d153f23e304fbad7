// Mamba-2's state-space scan as one differentiable op on the backend's scan kernels
// (backend.h: ssm_scan_forward / ssm_scan_backward), the recurrence nn/ssd.h states:
//   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T,      y_t = S_t C_t.
// nn::ssd_scan computes the same thing chunked, from composed ops (GEMMs within chunks).
#pragma once
#include "loom/core/tensor.h"

namespace loom {

struct SsmScanResult {
  Tensor y;            // (B, T, H, P)
  Tensor final_state;  // (B, H, P, N)
};

// x (B, T, H, P), dt (B, T, H), A (H), Bm and Cm (B, T, G, N), initial_state (B, H, P, N) or
// undefined (zeros); f32. The backward keeps the state every `every` steps (B H ceil(T / every)
// P N values) and recomputes at most `every` steps from each.
SsmScanResult ssm_scan(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                       const Tensor& Cm, int64_t every, const Tensor& initial_state = Tensor());

}  // namespace loom
