// Block-wise int8 / int4 quantisation against a float64 reference computed here: the encoded
// size from the layout's arithmetic, each decoded value within half its block's scale of the
// input, the block's largest value exact, and bf16 scales.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/core/error.h"
#include "loom/lowcomm/quantize.h"

namespace loom::lowcomm {
namespace {

std::vector<float> values(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[size_t(i)] = float(std::sin(0.7 * double(i)) * std::exp(0.002 * double(i % 200)) - 0.1);
  return x;
}

TEST(Quantize, EncodedSizeIsScalesPlusCodes) {
  // 1000 values in blocks of 128: 7 full blocks and one of 104.
  EXPECT_EQ(encoded_bytes({Compression::Int8, 128, DType::F32}, 1000), 8 * 4 + 1000);
  EXPECT_EQ(encoded_bytes({Compression::Int4, 128, DType::F32}, 1000), 8 * 4 + 7 * 64 + 52);
  EXPECT_EQ(encoded_bytes({Compression::Int4, 128, DType::BF16}, 1001), 8 * 2 + 7 * 64 + 53);
  EXPECT_EQ(encoded_bytes({Compression::Int8, 16, DType::F32}, 0), 0);
}

TEST(Quantize, RoundTripWithinHalfAScale) {
  for (Compression kind : {Compression::Int8, Compression::Int4})
    for (DType scale_dtype : {DType::F32, DType::BF16})
      for (int64_t n : {1, 7, 128, 1001}) {
        const QuantConfig q{kind, 32, scale_dtype};
        const std::vector<float> x = values(n);
        std::vector<uint8_t> bytes(static_cast<size_t>(encoded_bytes(q, n)));
        encode(q, x.data(), n, bytes.data());
        std::vector<float> y(static_cast<size_t>(n));
        decode(q, bytes.data(), n, y.data());
        const double qmax = kind == Compression::Int8 ? 127 : 7;
        for (int64_t b0 = 0; b0 < n; b0 += q.block) {
          const int64_t end = std::min(n, b0 + q.block);
          double amax = 0;
          for (int64_t i = b0; i < end; ++i) amax = std::max(amax, std::abs(double(x[size_t(i)])));
          // bf16 rounds the scale (8 bits of mantissa): the largest value may then clamp.
          const double scale = amax / qmax;
          const double slack = scale_dtype == DType::BF16 ? amax * 0.5 / 128 : 1e-7 * amax;
          for (int64_t i = b0; i < end; ++i)
            ASSERT_LE(std::abs(double(y[size_t(i)]) - double(x[size_t(i)])), 0.5 * scale + slack)
                << name_of(kind) << " n " << n << " element " << i;
        }
      }
}

TEST(Quantize, ZerosAndSignsSurvive) {
  const QuantConfig q{Compression::Int4, 4, DType::F32};
  const std::vector<float> x = {0, 0, 0, 0, -3.5f, 3.5f, 1.0f, -1.0f};
  std::vector<uint8_t> bytes(static_cast<size_t>(encoded_bytes(q, 8)));
  encode(q, x.data(), 8, bytes.data());
  std::vector<float> y(8);
  decode(q, bytes.data(), 8, y.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[size_t(i)], 0.0f);
  // Scale 0.5: -3.5 and 3.5 are codes -7 and 7 exactly, 1 and -1 codes 2 and -2.
  EXPECT_EQ(y[4], -3.5f);
  EXPECT_EQ(y[5], 3.5f);
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_EQ(y[7], -1.0f);
}

TEST(Quantize, NamesAndBadConfigs) {
  EXPECT_EQ(compression_from_name("int4", "x"), Compression::Int4);
  EXPECT_THROW(compression_from_name("int2", "x"), Error);
  EXPECT_THROW(encoded_bytes({Compression::Int8, 0, DType::F32}, 10), Error);
  EXPECT_THROW(encoded_bytes({Compression::None, 8, DType::F32}, 10), Error);
}

}  // namespace
}  // namespace loom::lowcomm
