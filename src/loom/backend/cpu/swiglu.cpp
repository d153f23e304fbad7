// SwiGLU activation silu(gate) * up, fused forward and backward.
#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/vec_math.h"

namespace loom {

void CpuBackend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  const int64_t n = gate.numel();
  cpu::dispatch_float(gate.dtype(), "swiglu", [&](auto z) {
    using E = decltype(z);
    const E* gp = static_cast<const E*>(gate.data_ptr());
    const E* up_p = static_cast<const E*>(up.data_ptr());
    E* op = static_cast<E*>(out.data_ptr());
    cpu::parallel_for(n, 20, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float g = to_f32(gp[i]);
        op[i] = from_f32<E>(g * cpu::fast_sigmoid(g) * to_f32(up_p[i]));
      }
    });
  });
}

void CpuBackend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gout,
                                 const Tensor& ggate, const Tensor& gup) {
  const int64_t n = gate.numel();
  cpu::dispatch_float(gate.dtype(), "swiglu_backward", [&](auto z) {
    using E = decltype(z);
    const E* gp = static_cast<const E*>(gate.data_ptr());
    const E* up_p = static_cast<const E*>(up.data_ptr());
    const E* go = static_cast<const E*>(gout.data_ptr());
    E* gg = static_cast<E*>(ggate.data_ptr());
    E* gu = static_cast<E*>(gup.data_ptr());
    cpu::parallel_for(n, 25, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float g = to_f32(gp[i]), u = to_f32(up_p[i]), d = to_f32(go[i]);
        const float s = cpu::fast_sigmoid(g);
        gu[i] = from_f32<E>(d * g * s);
        gg[i] = from_f32<E>(d * u * s * (1.0f + g * (1.0f - s)));
      }
    });
  });
}

}  // namespace loom
