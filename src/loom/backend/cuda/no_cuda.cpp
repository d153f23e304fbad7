// Stub twin of the CUDA backend, compiled when the build has no CUDA backend.
#include "loom/backend/backend.h"

namespace loom {

Backend& cuda_backend() {
  LOOM_FAIL() << "this Loom was built without its CUDA backend (no nvcc at build time, or "
                 "-DLOOM_CUDA=OFF); use device cpu";
}

}  // namespace loom
