#include "loom/lowcomm/quantize.h"

#include <algorithm>

#include "loom/backend/backend.h"
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

void check(const QuantConfig& q) {
  LOOM_CHECK(q.kind != Compression::None && q.block > 0 &&
             (q.scale_dtype == DType::F32 || q.scale_dtype == DType::BF16))
      << "quantize: needs int8 or int4, a positive block size and f32 or bf16 scales";
}

}  // namespace

WireQuant wire_quant(const QuantConfig& q) {
  check(q);
  return {q.kind == Compression::Int4 ? 7 : 127, q.block, q.scale_dtype == DType::BF16};
}

int64_t encoded_bytes(const QuantConfig& q, int64_t n) {
  return wire_bytes(wire_quant(q), n);
}

void encode(const QuantConfig& q, const float* x, int64_t n, uint8_t* out) {
  const WireQuant w = wire_quant(q);
  const int64_t stride = wire_bytes(w, w.block);
  for (int64_t b0 = 0; b0 < n; b0 += w.block)
    wire_encode_block(w, x + b0, std::min(w.block, n - b0), out + b0 / w.block * stride);
}

void decode(const QuantConfig& q, const uint8_t* in, int64_t n, float* out) {
  const WireQuant w = wire_quant(q);
  const int64_t stride = wire_bytes(w, w.block);
  for (int64_t b0 = 0; b0 < n; b0 += w.block)
    wire_decode_block(w, in + b0 / w.block * stride, std::min(w.block, n - b0), out + b0);
}

void encode(const QuantConfig& q, const Tensor& x, const Tensor& out) {
  backend_for(x.device()).wire_encode(x, wire_quant(q), out);
}

void decode(const QuantConfig& q, const Tensor& in, const Tensor& out) {
  backend_for(in.device()).wire_decode(in, wire_quant(q), out);
}

}  // namespace loom::lowcomm
