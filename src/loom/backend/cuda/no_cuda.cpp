// Stub twin of the CUDA backend, compiled when the build has no CUDA backend.
#include "loom/backend/backend.h"

namespace loom {

Backend& cuda_backend() {
  LOOM_FAIL() << "this Loom has no CUDA backend yet (only the CPU backend is built); use "
                 "device cpu";
}

}  // namespace loom
