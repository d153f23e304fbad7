#include "loom/lowcomm/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"

namespace loom::lowcomm {

Compression compression_from_name(const std::string& name, const std::string& what) {
  if (name == "none") return Compression::None;
  if (name == "int8") return Compression::Int8;
  if (name == "int4") return Compression::Int4;
  LOOM_FAIL() << what << " '" << name << "' (expected none, int8 or int4)";
  return Compression::None;
}

const char* name_of(Compression kind) {
  switch (kind) {
    case Compression::None:
      return "none";
    case Compression::Int8:
      return "int8";
    case Compression::Int4:
      return "int4";
  }
  return "?";
}

namespace {

int qmax(Compression kind) {
  return kind == Compression::Int4 ? 7 : 127;
}
int64_t scale_bytes(const QuantConfig& q) {
  return q.scale_dtype == DType::BF16 ? 2 : 4;
}
int64_t code_bytes(const QuantConfig& q, int64_t values) {
  return q.kind == Compression::Int4 ? (values + 1) / 2 : values;
}

void check(const QuantConfig& q) {
  LOOM_CHECK(q.kind != Compression::None && q.block > 0 &&
             (q.scale_dtype == DType::F32 || q.scale_dtype == DType::BF16))
      << "quantize: needs int8 or int4, a positive block size and f32 or bf16 scales";
}

}  // namespace

int64_t encoded_bytes(const QuantConfig& q, int64_t n) {
  check(q);
  const int64_t full = n / q.block, rest = n % q.block;
  return (full + (rest > 0)) * scale_bytes(q) + full * code_bytes(q, q.block) + code_bytes(q, rest);
}

void encode(const QuantConfig& q, const float* x, int64_t n, uint8_t* out) {
  check(q);
  const int Q = qmax(q.kind);
  for (int64_t b0 = 0; b0 < n; b0 += q.block) {
    const int64_t len = std::min(q.block, n - b0);
    float amax = 0;
    for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::abs(x[b0 + i]));
    // The scale as stored (rounded to bf16 first) is the one the codes are computed with, so
    // decoding reproduces exactly what encoding meant.
    float scale = amax / float(Q);
    if (q.scale_dtype == DType::BF16) {
      const bf16 s = to_bf16(scale);
      scale = to_f32(s);
      std::memcpy(out, &s, 2);
    } else {
      std::memcpy(out, &scale, 4);
    }
    out += scale_bytes(q);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < len; ++i) {
      const int code = std::clamp(int(std::lrintf(x[b0 + i] * inv)), -Q, Q);
      if (q.kind == Compression::Int8) {
        out[i] = uint8_t(int8_t(code));
      } else if (i % 2 == 0) {
        out[i / 2] = uint8_t(code + 8);  // the low nibble; the high one follows
      } else {
        out[i / 2] = uint8_t(out[i / 2] | ((code + 8) << 4));
      }
    }
    out += code_bytes(q, len);
  }
}

void decode(const QuantConfig& q, const uint8_t* in, int64_t n, float* out) {
  check(q);
  for (int64_t b0 = 0; b0 < n; b0 += q.block) {
    const int64_t len = std::min(q.block, n - b0);
    float scale = 0;
    if (q.scale_dtype == DType::BF16) {
      bf16 s;
      std::memcpy(&s, in, 2);
      scale = to_f32(s);
    } else {
      std::memcpy(&scale, in, 4);
    }
    in += scale_bytes(q);
    for (int64_t i = 0; i < len; ++i) {
      const int code = q.kind == Compression::Int8 ? int(int8_t(in[i]))
                                                   : int((in[i / 2] >> (4 * (i % 2))) & 15) - 8;
      out[b0 + i] = float(code) * scale;
    }
    in += code_bytes(q, len);
  }
}

}  // namespace loom::lowcomm
