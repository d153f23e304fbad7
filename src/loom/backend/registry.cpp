#include "loom/backend/backend.h"

namespace loom {

Backend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU: return cpu_backend();
    case DeviceType::CUDA: return cuda_backend();
  }
  LOOM_FAIL() << "unknown device type " << int(device.type);
}

}  // namespace loom
