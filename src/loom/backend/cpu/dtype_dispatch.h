// The CPU kernels' name for the shared dispatch (backend/dtype_dispatch.h).
#pragma once
#include "loom/backend/dtype_dispatch.h"

namespace loom::cpu {
using loom::dispatch_float;
}  // namespace loom::cpu
