// Block-wise quantisation of float vectors for the wire: each block of `block` values becomes
// one scale (max |x| / qmax, stored as f32 or bf16) and one signed code per value, round to
// nearest: int8 (qmax 127, a byte per value) or int4 (qmax 7, two values per byte). The error
// of a value is at most half its block's scale. The format's rules are
// backend/wire_quantize.h's, which the devices' kernels run too.
#pragma once
#include <cstdint>
#include <string>

#include "loom/backend/wire_quantize.h"
#include "loom/core/dtype.h"
#include "loom/core/tensor.h"

namespace loom::lowcomm {

enum class Compression { None, Int8, Int4 };
Compression compression_from_name(const std::string& name, const std::string& what);
const char* name_of(Compression kind);

struct QuantConfig {
  Compression kind = Compression::Int8;
  int64_t block = 128;             // values per scale
  DType scale_dtype = DType::F32;  // F32 or BF16
};

// Bytes the encoding of n values takes (a trailing partial block included).
int64_t encoded_bytes(const QuantConfig& q, int64_t n);
// out: encoded_bytes(q, n) bytes; block k is its scale, then its codes.
void encode(const QuantConfig& q, const float* x, int64_t n, uint8_t* out);
void decode(const QuantConfig& q, const uint8_t* in, int64_t n, float* out);
// The same on tensors of any device, by its backend's kernel: x (n) f32 -> out
// (encoded_bytes(q, n)) u8, and back.
void encode(const QuantConfig& q, const Tensor& x, const Tensor& out);
void decode(const QuantConfig& q, const Tensor& in, const Tensor& out);
WireQuant wire_quant(const QuantConfig& q);  // checks q

}  // namespace loom::lowcomm
