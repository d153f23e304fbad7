// cuDNN's fused attention (flash attention on tensor cores), the CUDA backend's fast path for
// scaled-dot-product attention: bf16 and f16, causal or not, GQA, no additive mask. cuDNN is
// loaded when first needed (libcudnn.so.9), so a machine without it still runs Loom, on the
// backend's own kernels (attention.cu). Built from cudnn_attention.cpp where cuDNN's frontend
// headers are found, else from no_cudnn.cpp, whose functions always decline.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/tensor.h"

namespace loom::cuda {

// Each runs the call on cuDNN and returns true, or returns false having done nothing when
// cuDNN is absent or declines the problem (dtype, head dim, strides, alignment); the caller
// then runs its own kernels. Shapes and dtypes are those of Backend::attention_forward and
// attention_backward, already checked. The backward is cuDNN's deterministic algorithm:
// repeated runs give the same bits, as the CPU's do.
bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             bool causal, const Tensor& out, const Tensor& lse);
bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                              bool causal, const Tensor& out, const Tensor& lse, const Tensor& gout,
                              const Tensor& gq, const Tensor& gk, const Tensor& gv);

// What the fast path did so far, for tests and the device report: the cuDNN version loaded
// (0 if none), how many calls ran on it, and why cuDNN was not loaded or last declined a
// problem ("" if it never did).
struct CudnnAttentionStatus {
  int64_t version = 0;
  int64_t forward_runs = 0, backward_runs = 0;
  std::string last_refusal;
};
CudnnAttentionStatus cudnn_attention_status();

}  // namespace loom::cuda
