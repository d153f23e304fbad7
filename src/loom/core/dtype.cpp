#include "loom/core/dtype.h"

#include <cmath>

#include "loom/core/error.h"

namespace loom {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::F8E4M3:
      return 1;
    case DType::F8E5M2:
      return 1;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
  }
  LOOM_FAIL() << "bad dtype " << int(dtype);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::F8E4M3:
      return "f8e4m3";
    case DType::F8E5M2:
      return "f8e5m2";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
  }
  return "?";
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 ||
         dtype == DType::F8E4M3 || dtype == DType::F8E5M2;
}

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::I32,
                  DType::I64, DType::U8}) {
    if (name == dtype_name(d)) return d;
  }
  LOOM_FAIL() << "unknown dtype '" << name
              << "' (expected one of f32, bf16, f16, f8e4m3, f8e5m2, i32, i64, u8)";
}

}  // namespace loom
