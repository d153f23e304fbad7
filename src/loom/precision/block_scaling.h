// Block-scaled formats: OCP Microscaling v1.0 (MXFP8 with E4M3 or E5M2 elements, MXFP4 with
// E2M1; blocks of 32 consecutive values sharing one E8M0 scale) and NVIDIA's NVFP4 (E2M1
// elements in blocks of 16 sharing an E4M3 scale, under one f32 scale for the whole tensor).
// Values are quantised in runs of `block` consecutive elements of a flat buffer, so a
// row-major (rows, cols) matrix with cols a multiple of the block is scaled along its rows.
// Codes are one per byte (E2M1's four bits in the low half); unpacked, since these buffers
// only feed the emulated GEMMs.
#pragma once
#include <cstdint>
#include <vector>

#include "loom/precision/formats.h"

namespace loom::precision {

// Where stochastic rounding draws from: element i of the buffer uses Philox at (key, offset +
// i), so the draw belongs to the element's place in the whole tensor, not to how it is split.
struct StochasticRounding {
  uint64_t key = 0;
  uint64_t offset = 0;
};

constexpr int64_t kMxBlock = 32;     // OCP MX v1.0's k
constexpr int64_t kNvfp4Block = 16;  // NVFP4's block

struct MxQuantized {
  Element element = Element::E4M3;
  std::vector<uint8_t> codes;   // one per value
  std::vector<uint8_t> scales;  // E8M0, one per block
};

// OCP MX v1.0 (section 6.3): X = 2^(floor(log2(max |v|)) - emax), emax the exponent of the
// element format's largest power of two; P_i = v_i / X in the element format, saturating. A
// block of zeros gets the smallest scale; a block holding a NaN or an infinity gets the NaN
// scale (0xFF), and every value of it decodes as NaN. `block` must be 32 (the spec's k) and
// divide n. sr: stochastic rounding of the elements (null: nearest even).
MxQuantized mx_quantize(const float* x, int64_t n, Element element, int64_t block = kMxBlock,
                        const StochasticRounding* sr = nullptr);
void mx_dequantize(const MxQuantized& q, float* out);

struct Nvfp4Quantized {
  float tensor_scale = 1;       // s_enc = 6 * 448 / amax(tensor)
  std::vector<uint8_t> codes;   // E2M1, one per value
  std::vector<uint8_t> scales;  // E4M3, one per block of 16: amax(block) / 6 * s_enc
};

// NVFP4: a tensor scale s_enc = (6 * 448) / amax(x) (1 when amax is 0) brings the block scales
// into E4M3's range; block b's scale is s_b = E4M3(amax_b / 6 * s_enc); each value is
// E2M1(v_i * s_enc / s_b) (saturating), and decodes as code * s_b / s_enc. `block` must be 16
// and divide n; amax is the whole tensor's (a tensor split over ranks passes the global one).
Nvfp4Quantized nvfp4_quantize(const float* x, int64_t n, float amax, int64_t block = kNvfp4Block,
                              const StochasticRounding* sr = nullptr);
void nvfp4_dequantize(const Nvfp4Quantized& q, float* out);

}  // namespace loom::precision
