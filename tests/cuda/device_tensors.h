// What the CUDA backend's kernel tests share: tensors moved to a device and back through the
// backends' own copies, and bit equality of floats (NaN equal to NaN).
#pragma once
#include <cmath>

#include "loom/backend/backend.h"
#include "loom/core/dtype.h"
#include "loom/core/tensor.h"

namespace loom::test {

inline const Device kCuda{DeviceType::CUDA, 0};

// A host tensor on `device` (itself when that is the host).
inline Tensor on(const Tensor& host, Device device) {
  if (device.type == DeviceType::CPU) return host;
  Tensor t = Tensor::empty(host.shape(), host.dtype(), device);
  backend_for(device).copy(host, t);
  return t;
}

inline Tensor to_host(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  backend_for(t.device()).copy(t, h);
  return h;
}

inline bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b);
}

}  // namespace loom::test
