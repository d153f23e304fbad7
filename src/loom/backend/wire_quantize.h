// Block quantisation of f32 values for the wire (DiLoCo's compressed pseudo-gradients,
// lowcomm/quantize.h), as every backend encodes and decodes it (Backend::wire_encode,
// wire_decode): each block of `block` values is its scale, max |x| / qmax stored as f32 or
// bf16, then one signed code per value rounded to nearest even: int8 (qmax 127, a byte each)
// or int4 (qmax 7, two values a byte, the first in the low nibble, biased by 8). One block
// per call, so the host and the device run the same arithmetic.
#pragma once
#include <cstdint>

#include "loom/core/dtype.h"
#include "loom/core/host_device.h"

namespace loom {

struct WireQuant {
  int qmax = 127;       // 127: int8, 7: int4
  int64_t block = 128;  // values per scale
  bool bf16_scale = false;
};

LOOM_HD inline int64_t wire_scale_bytes(const WireQuant& q) {
  return q.bf16_scale ? 2 : 4;
}
LOOM_HD inline int64_t wire_code_bytes(const WireQuant& q, int64_t values) {
  return q.qmax == 7 ? (values + 1) / 2 : values;
}
// The bytes of n values (a trailing partial block included); block k starts at
// k * wire_bytes(q, q.block).
LOOM_HD inline int64_t wire_bytes(const WireQuant& q, int64_t n) {
  const int64_t full = n / q.block, rest = n % q.block;
  return (full + (rest > 0 ? 1 : 0)) * wire_scale_bytes(q) + full * wire_code_bytes(q, q.block) +
         wire_code_bytes(q, rest);
}

// len (<= block) values -> their scale and codes at out. The scale as stored (rounded to bf16
// first) is the one the codes are computed with, so decoding gives what encoding meant.
LOOM_HD inline void wire_encode_block(const WireQuant& q, const float* x, int64_t len,
                                      uint8_t* out) {
  float amax = 0;
  for (int64_t i = 0; i < len; ++i) amax = fmaxf(amax, fabsf(x[i]));
  float scale = amax / float(q.qmax);
  const uint32_t bits = q.bf16_scale ? uint32_t(to_bf16(scale).bits) : f32_bits(scale);
  if (q.bf16_scale) scale = to_f32(bf16{uint16_t(bits)});
  for (int64_t k = 0; k < wire_scale_bytes(q); ++k) out[k] = uint8_t(bits >> (8 * k));
  out += wire_scale_bytes(q);
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < len; ++i) {
    int code = int(lrintf(x[i] * inv));
    code = code < -q.qmax ? -q.qmax : (code > q.qmax ? q.qmax : code);
    if (q.qmax != 7) {
      out[i] = uint8_t(int8_t(code));
    } else if (i % 2 == 0) {
      out[i / 2] = uint8_t(code + 8);  // the low nibble; the high one follows
    } else {
      out[i / 2] = uint8_t(out[i / 2] | ((code + 8) << 4));
    }
  }
}

// A block's scale and len codes at in -> len values.
LOOM_HD inline void wire_decode_block(const WireQuant& q, const uint8_t* in, int64_t len,
                                      float* out) {
  uint32_t bits = 0;
  for (int64_t k = 0; k < wire_scale_bytes(q); ++k) bits |= uint32_t(in[k]) << (8 * k);
  const float scale = q.bf16_scale ? to_f32(bf16{uint16_t(bits)}) : f32_from_bits(bits);
  in += wire_scale_bytes(q);
  for (int64_t i = 0; i < len; ++i) {
    const int code = q.qmax != 7 ? int(int8_t(in[i])) : int((in[i / 2] >> (4 * (i % 2))) & 15) - 8;
    out[i] = float(code) * scale;
  }
}

}  // namespace loom
