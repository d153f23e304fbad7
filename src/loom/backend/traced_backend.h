// The profiler's view of a backend: every kernel call timed as a trace event.
#pragma once
#include "loom/backend/backend.h"

namespace loom {

// The traced twin of cpu_backend() (any other backend comes back as it is, untraced).
Backend& traced(Backend& inner);

}  // namespace loom
