#include "loom/backend/cpu/cpu_backend.h"

namespace loom {

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace loom
