// MX and NVFP4 block quantisation (block_scaling.h).
#include "loom/precision/block_scaling.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::precision {
namespace {

void check_blocks(const char* format, int64_t n, int64_t block, int64_t required) {
  LOOM_CHECK(block == required) << format << ": blocks are " << required
                                << " values by the format's definition, not " << block;
  LOOM_CHECK(n % block == 0) << format << ": " << n << " values do not split into blocks of "
                             << block;
}

float draw(const StochasticRounding* sr, int64_t i) {
  return sr ? uniform_at(sr->key, sr->offset + uint64_t(i)) : -1.0f;
}

}  // namespace

MxQuantized mx_quantize(const float* x, int64_t n, Element element, int64_t block,
                        const StochasticRounding* sr) {
  check_blocks(element == Element::E2M1 ? "mxfp4" : "mxfp8", n, block, kMxBlock);
  MxQuantized q;
  q.element = element;
  q.codes.resize(size_t(n));
  q.scales.resize(size_t(n / block));
  for (int64_t b = 0; b < n / block; ++b) {
    const float* v = x + b * block;
    float amax = 0;
    bool finite = true;
    for (int64_t i = 0; i < block; ++i) {
      finite &= std::isfinite(v[i]);
      amax = std::max(amax, std::fabs(v[i]));
    }
    if (!finite) {
      q.scales[size_t(b)] = 0xFF;
      continue;  // the codes do not matter under a NaN scale
    }
    const int exponent =
        amax == 0 ? -127 : std::max(-127, std::ilogb(amax) - element_emax(element));
    q.scales[size_t(b)] = encode_e8m0(exponent);
    for (int64_t i = 0; i < block; ++i)  // v / 2^exponent is exact in f32 (or flushes subnormals
      q.codes[size_t(b * block + i)] =   // of the smallest scales, far below every element)
          encode(element, std::ldexp(v[i], -exponent), draw(sr, b * block + i));
  }
  return q;
}

void mx_dequantize(const MxQuantized& q, float* out) {
  const int64_t block = kMxBlock;
  for (size_t i = 0; i < q.codes.size(); ++i)
    out[i] = decode(q.element, q.codes[i]) * decode_e8m0(q.scales[i / size_t(block)]);
}

Nvfp4Quantized nvfp4_quantize(const float* x, int64_t n, float amax, int64_t block,
                              const StochasticRounding* sr) {
  check_blocks("nvfp4", n, block, kNvfp4Block);
  LOOM_CHECK(std::isfinite(amax) && amax >= 0)
      << "nvfp4: the tensor's amax must be finite and non-negative, got " << amax;
  Nvfp4Quantized q;
  q.tensor_scale = amax > 0 ? float(6.0 * 448.0 / double(amax)) : 1.0f;
  q.codes.resize(size_t(n));
  q.scales.resize(size_t(n / block));
  for (int64_t b = 0; b < n / block; ++b) {
    const float* v = x + b * block;
    float block_amax = 0;
    for (int64_t i = 0; i < block; ++i) block_amax = std::max(block_amax, std::fabs(v[i]));
    const uint8_t scale = encode(Element::E4M3, block_amax / 6.0f * q.tensor_scale);
    q.scales[size_t(b)] = scale;
    const float s = decode(Element::E4M3, scale);
    // A block of zeros (or one whose scale underflows E4M3) encodes zeros.
    const float to_element = s > 0 ? q.tensor_scale / s : 0.0f;
    for (int64_t i = 0; i < block; ++i)
      q.codes[size_t(b * block + i)] =
          encode(Element::E2M1, v[i] * to_element, draw(sr, b * block + i));
  }
  return q;
}

void nvfp4_dequantize(const Nvfp4Quantized& q, float* out) {
  const size_t block = size_t(kNvfp4Block);
  for (size_t i = 0; i < q.codes.size(); ++i)
    out[i] = decode(Element::E2M1, q.codes[i]) *
             (decode(Element::E4M3, q.scales[i / block]) / q.tensor_scale);
}

}  // namespace loom::precision
