// Stub twin of the CUDA backend, compiled when the build has no CUDA backend.
#include "loom/backend/backend.h"

namespace loom {

Backend& cuda_backend() {
  LOOM_FAIL() << "this Loom was built without the CUDA backend; use device cpu or rebuild "
                 "with -DLOOM_CUDA=ON on a machine with nvcc";
}

}  // namespace loom
