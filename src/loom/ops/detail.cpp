#include "loom/ops/detail.h"

namespace loom::detail {

Tensor raw_to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  // The device side's backend knows both kinds of memory.
  backend_for(device.type == DeviceType::CPU ? t.device() : device).copy(t, out);
  return out;
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  LOOM_CHECK(t.defined()) << op << ": " << what << " is an undefined tensor";
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  check_defined(op, t, what);
  LOOM_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16)
      << op << ": " << what << " has dtype " << dtype_name(t.dtype()) << " (shape " << t.shape()
      << "); expected f32, bf16 or f16";
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(a.dtype() == b.dtype())
      << op << ": dtypes differ: " << dtype_name(a.dtype()) << " " << a.shape() << " vs "
      << dtype_name(b.dtype()) << " " << b.shape();
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(a.device() == b.device())
      << op << ": tensors on different devices: " << a.device().str() << " vs " << b.device().str();
}

void check_shape(const char* op, const Tensor& t, const Shape& expected, const char* what) {
  LOOM_CHECK(t.shape() == expected)
      << op << ": " << what << " has shape " << t.shape() << ", expected " << expected;
}

}  // namespace loom::detail
