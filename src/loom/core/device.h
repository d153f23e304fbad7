// Where a tensor's storage lives. Kernels are chosen by device type (see backend/backend.h).
#pragma once
#include <string>

namespace loom {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const {
    return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
  }
};

inline Device cpu_device() {
  return Device{DeviceType::CPU, 0};
}

}  // namespace loom
