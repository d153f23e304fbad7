// Stub twin of cudnn_attention.cpp, compiled when the build found no cuDNN frontend headers:
// every call declines, and attention runs on the backend's own kernels.
#include "loom/backend/cuda/cudnn_attention.h"

namespace loom::cuda {

namespace {
const char* const kWhy =
    "Loom was built without cuDNN's frontend headers (scripts/bootstrap.sh "
    "fetches them)";
}

bool cudnn_attention_forward(const Tensor&, const Tensor&, const Tensor&, float, bool,
                             const Tensor&, const Tensor&) {
  return false;
}
bool cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, float, bool,
                              const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&) {
  return false;
}
CudnnAttentionStatus cudnn_attention_status() {
  CudnnAttentionStatus s;
  s.last_refusal = kWhy;
  return s;
}

}  // namespace loom::cuda
