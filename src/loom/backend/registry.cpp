#include "loom/backend/backend.h"
#include "loom/backend/traced_backend.h"
#include "loom/core/trace.h"

namespace loom {

namespace {
Backend& untraced_backend_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU:
      return cpu_backend();
    case DeviceType::CUDA:
      return cuda_backend();
  }
  LOOM_FAIL() << "unknown device type " << int(device.type);
}
}  // namespace

Backend& backend_for(Device device) {
  Backend& b = untraced_backend_for(device);
  return trace::recording() ? traced(b) : b;
}

}  // namespace loom
