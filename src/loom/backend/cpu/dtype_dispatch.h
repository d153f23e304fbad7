// Runs a kernel template for the element type of a floating tensor.
#pragma once
#include "loom/core/dtype.h"
#include "loom/core/error.h"

namespace loom::cpu {

// fn is called with a value of the element type (float, bf16 or f16) to select the template.
template <typename Fn>
void dispatch_float(DType dtype, const char* kernel, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::BF16:
      fn(bf16{});
      return;
    case DType::F16:
      fn(f16{});
      return;
    default:
      LOOM_FAIL() << kernel << ": unsupported dtype " << dtype_name(dtype)
                  << " (expected f32, bf16 or f16)";
  }
}

}  // namespace loom::cpu
