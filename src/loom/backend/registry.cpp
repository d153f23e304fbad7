#include "loom/backend/backend.h"

#include <atomic>
#include "loom/backend/traced_backend.h"
#include "loom/core/trace.h"

namespace loom {

namespace {
Backend* g_registered[2] = {nullptr, nullptr};
std::atomic<bool> g_allow_tf32{false};

Backend& untraced_backend_for(Device device) {
  if (Backend* b = g_registered[int(device.type)]) return *b;
  switch (device.type) {
    case DeviceType::CPU:
      return cpu_backend();
    case DeviceType::CUDA:
      return cuda_backend();
  }
  LOOM_FAIL() << "unknown device type " << int(device.type);
}
}  // namespace

void set_allow_tf32(bool allow) {
  g_allow_tf32 = allow;
}
bool allow_tf32() {
  return g_allow_tf32;
}

void register_backend(DeviceType type, Backend* backend) {
  g_registered[int(type)] = backend;
}

Backend& backend_for(Device device) {
  Backend& b = untraced_backend_for(device);
  return trace::recording() ? traced(b) : b;
}

}  // namespace loom
