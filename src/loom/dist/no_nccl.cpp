// Stub twin of the NCCL process group (dist/nccl_group.h), compiled when the build has no
// CUDA backend or no NCCL.
#include "loom/dist/nccl_group.h"

#include "loom/core/error.h"

namespace loom::dist {

bool nccl_available() {
  return false;
}

std::shared_ptr<ProcessGroup> nccl_group(std::shared_ptr<ProcessGroup>, double) {
  LOOM_FAIL() << "this Loom was built without NCCL (no CUDA backend, or no nccl.h and libnccl "
                 "at build time): GPU collectives are not available";
}

}  // namespace loom::dist
