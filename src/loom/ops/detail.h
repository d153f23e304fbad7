// Helpers shared by the op files (not part of the public op API).
#pragma once
#include <memory>
#include <vector>

#include "loom/autograd/node.h"
#include "loom/backend/backend.h"
#include "loom/core/tensor.h"

namespace loom::detail {

inline Backend& backend_of(const Tensor& t) {
  return backend_for(t.device());
}

inline Tensor empty_like(const Tensor& t) {
  return Tensor::empty(t.shape(), t.dtype(), t.device());
}

// A contiguous version of t, without recording a graph edge (for kernels that need it).
inline Tensor raw_contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty_like(t);
  backend_of(t).copy(t, out);
  return out;
}

inline Tensor raw_zeros(const Shape& shape, DType dtype, Device device) {
  Tensor out = Tensor::empty(shape, dtype, device);
  backend_for(device).fill(out, 0.0);
  return out;
}

// `t` on `device` (itself when it is there already): index metadata such as token positions is
// made on the host and moved to the device of the data it indexes. No autograd edge.
Tensor raw_to_device(const Tensor& t, Device device);

void check_defined(const char* op, const Tensor& t, const char* what);
void check_floating(const char* op, const Tensor& t, const char* what);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_shape(const char* op, const Tensor& t, const Shape& expected, const char* what);

}  // namespace loom::detail
