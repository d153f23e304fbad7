// The low-precision codecs against their specifications. The tables below are written from the
// format definitions (OCP 8-bit Floating Point v1.0, OCP Microscaling v1.0, NVIDIA's NVFP4
// description), not from the code: value = (-1)^s 2^(e - bias) (1 + m / 2^M), subnormals
// 2^(1 - bias) (m / 2^M).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/precision/block_scaling.h"
#include "loom/precision/formats.h"

namespace loom::precision {
namespace {

TEST(Formats, E2M1HasTheEightMagnitudesOfTheSpec) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t code = 0; code < 16; ++code) {
    const float want = code & 8 ? -magnitudes[code & 7] : magnitudes[code & 7];
    EXPECT_EQ(decode(Element::E2M1, code), want) << int(code);
    EXPECT_EQ(std::signbit(decode(Element::E2M1, code)), bool(code & 8)) << int(code);
    EXPECT_EQ(encode(Element::E2M1, want), code) << want;
  }
}

TEST(Formats, E4M3AndE5M2PointsOfTheSpec) {
  struct Point {
    Element e;
    uint8_t code;
    double value;
  };
  const Point points[] = {
      {Element::E4M3, 0x01, std::ldexp(1.0, -9)},      // smallest subnormal
      {Element::E4M3, 0x07, 7 * std::ldexp(1.0, -9)},  // largest subnormal
      {Element::E4M3, 0x08, std::ldexp(1.0, -6)},      // smallest normal
      {Element::E4M3, 0x38, 1.0},
      {Element::E4M3, 0x7E, 448.0},  // largest: S.1111.110
      {Element::E4M3, 0xFE, -448.0},
      {Element::E5M2, 0x01, std::ldexp(1.0, -16)},
      {Element::E5M2, 0x04, std::ldexp(1.0, -14)},
      {Element::E5M2, 0x3C, 1.0},
      {Element::E5M2, 0x7B, 57344.0},  // largest: S.11110.11
      {Element::E5M2, 0x7C, INFINITY},
  };
  for (const Point& p : points) {
    SCOPED_TRACE(element_name(p.e));
    EXPECT_EQ(decode(p.e, p.code), float(p.value)) << int(p.code);
    EXPECT_EQ(encode(p.e, float(p.value)), p.code) << p.value;
  }
  EXPECT_TRUE(std::isnan(decode(Element::E4M3, 0x7F)));  // S.1111.111
  EXPECT_TRUE(std::isnan(decode(Element::E4M3, 0xFF)));
  EXPECT_TRUE(std::isnan(decode(Element::E5M2, 0x7D)));  // S.11111.{01,10,11}
  EXPECT_TRUE(std::isnan(decode(Element::E5M2, 0x7F)));
  EXPECT_TRUE(std::isnan(decode(Element::E4M3, encode(Element::E4M3, NAN))));
  EXPECT_TRUE(std::isnan(decode(Element::E5M2, encode(Element::E5M2, NAN))));
}

TEST(Formats, EveryFiniteCodeRoundTripsAndAgreesWithTheStorageCodecs) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    const float a = decode(Element::E4M3, code), b = decode(Element::E5M2, code);
    // Loom's storage conversions (core/dtype), written separately on f32 bits.
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(to_f32(f8e4m3{code})));
    } else {
      EXPECT_EQ(a, to_f32(f8e4m3{code})) << c;
      EXPECT_EQ(encode(Element::E4M3, a), code) << c;
    }
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(to_f32(f8e5m2{code})));
    } else {
      EXPECT_EQ(b, to_f32(f8e5m2{code})) << c;
      EXPECT_EQ(encode(Element::E5M2, b), code) << c;
    }
  }
}

TEST(Formats, NearestEvenTiesAndSaturation) {
  // Halfway cases go to the even significand.
  EXPECT_EQ(round_to(Element::E2M1, 0.25f), 0.0f);
  EXPECT_EQ(round_to(Element::E2M1, 0.75f), 1.0f);
  EXPECT_EQ(round_to(Element::E2M1, 1.25f), 1.0f);
  EXPECT_EQ(round_to(Element::E2M1, 1.75f), 2.0f);
  EXPECT_EQ(round_to(Element::E2M1, 2.5f), 2.0f);
  EXPECT_EQ(round_to(Element::E2M1, 3.5f), 4.0f);
  EXPECT_EQ(round_to(Element::E2M1, 5.0f), 4.0f);
  EXPECT_EQ(round_to(Element::E2M1, 5.01f), 6.0f);
  EXPECT_EQ(round_to(Element::E4M3, 1.0625f), 1.0f);   // 1 + 2^-4: between 1 and 1.125
  EXPECT_EQ(round_to(Element::E4M3, 1.1875f), 1.25f);  // between 1.125 and 1.25
  EXPECT_EQ(round_to(Element::E4M3, float(std::ldexp(1.0, -10))), 0.0f);  // half the smallest
  EXPECT_EQ(round_to(Element::E4M3, float(3 * std::ldexp(1.0, -10))), float(std::ldexp(1.0, -8)));
  EXPECT_EQ(round_to(Element::E5M2, 1.125f), 1.0f);  // 1 + 2^-3: between 1 and 1.25
  // Beyond the largest finite value: saturate (E5M2 keeps a true infinity).
  EXPECT_EQ(round_to(Element::E2M1, 7.0f), 6.0f);
  EXPECT_EQ(round_to(Element::E2M1, -1e30f), -6.0f);
  EXPECT_EQ(round_to(Element::E4M3, 464.0f), 448.0f);
  EXPECT_EQ(round_to(Element::E4M3, INFINITY), 448.0f);
  EXPECT_EQ(round_to(Element::E5M2, 65536.0f), 57344.0f);
  EXPECT_EQ(round_to(Element::E5M2, -INFINITY), -INFINITY);
  EXPECT_EQ(encode(Element::E2M1, NAN), 0);  // no NaN in E2M1: the block scale carries it
}

TEST(Formats, StochasticRoundingPicksANeighbourWithTheRightOdds) {
  // 1.03 lies between 1.0 and 1.125 in E4M3, 0.24 of the way up: u below 0.24 rounds up.
  EXPECT_EQ(round_to(Element::E4M3, 1.03f, 0.0f), 1.125f);
  EXPECT_EQ(round_to(Element::E4M3, 1.03f, 0.2399f), 1.125f);
  EXPECT_EQ(round_to(Element::E4M3, 1.03f, 0.2401f), 1.0f);
  EXPECT_EQ(round_to(Element::E4M3, 1.03f, 0.999f), 1.0f);
  // Representable values never move; 5 in E2M1 (between 4 and 6) goes up for u < 0.5.
  for (float u : {0.0f, 0.5f, 0.99f}) EXPECT_EQ(round_to(Element::E2M1, 3.0f, u), 3.0f);
  EXPECT_EQ(round_to(Element::E2M1, -5.0f, 0.49f), -6.0f);
  EXPECT_EQ(round_to(Element::E2M1, -5.0f, 0.51f), -4.0f);
  // Unbiased: over Philox draws the mean of the rounded values is the value (to 4 sigma).
  for (const auto& [e, x] : {std::pair{Element::E4M3, 1.03f}, std::pair{Element::E2M1, 2.3f},
                             std::pair{Element::E5M2, -0.3f}}) {
    SCOPED_TRACE(element_name(e));
    const int n = 40000;
    double sum = 0, lo = 1e30, hi = -1e30;
    for (int i = 0; i < n; ++i) {
      const double r =
          round_to(e, x, uniform_at(RngKey{5, "sr_test", element_name(e)}.hash(), uint64_t(i)));
      sum += r;
      lo = std::min(lo, r), hi = std::max(hi, r);
    }
    EXPECT_NEAR(sum / n, x, 4 * (hi - lo) * 0.5 / std::sqrt(double(n)));
    EXPECT_LT(lo, x);
    EXPECT_GT(hi, x);
  }
}

TEST(Formats, E8M0ScalesArePowersOfTwo) {
  EXPECT_EQ(decode_e8m0(127), 1.0f);
  EXPECT_EQ(decode_e8m0(0), float(std::ldexp(1.0, -127)));
  EXPECT_EQ(decode_e8m0(254), float(std::ldexp(1.0, 127)));
  EXPECT_TRUE(std::isnan(decode_e8m0(255)));
  EXPECT_EQ(encode_e8m0(-3), 124);
  EXPECT_THROW(encode_e8m0(128), Error);
}

// --- OCP MX v1.0 ---

std::vector<float> block_of(float first, float rest) {
  std::vector<float> v(kMxBlock, rest);
  v[0] = first;
  return v;
}

TEST(Mx, SharedScaleFollowsTheSpecRule) {
  // X = 2^(floor(log2 amax) - emax); emax = 8 (E4M3), 15 (E5M2), 2 (E2M1).
  struct Case {
    Element e;
    float amax;
    int exponent;
  };
  const Case cases[] = {{Element::E4M3, 1.0f, -8},    {Element::E4M3, 500.0f, 0},
                        {Element::E5M2, 1.0f, -15},   {Element::E2M1, 6.0f, 0},
                        {Element::E2M1, 7.0f, 0},     {Element::E2M1, 0.3f, -4},
                        {Element::E4M3, 1e-38f, -127}};  // below the smallest scale: clamped
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(element_name(c.e)) + " amax " + std::to_string(c.amax));
    const std::vector<float> v = block_of(-c.amax, c.amax / 3);
    const MxQuantized q = mx_quantize(v.data(), kMxBlock, c.e);
    ASSERT_EQ(q.scales.size(), 1u);
    EXPECT_EQ(q.scales[0], uint8_t(c.exponent + 127));
  }
  // amax 500 in MXFP8 E4M3: 500 / 2^0 saturates to 448; 7 in MXFP4 to 6.
  std::vector<float> v = block_of(500.0f, 1.0f), out(kMxBlock);
  mx_dequantize(mx_quantize(v.data(), kMxBlock, Element::E4M3), out.data());
  EXPECT_EQ(out[0], 448.0f);
  EXPECT_EQ(out[1], 1.0f);
  v = block_of(7.0f, 1.0f);
  mx_dequantize(mx_quantize(v.data(), kMxBlock, Element::E2M1), out.data());
  EXPECT_EQ(out[0], 6.0f);
}

TEST(Mx, RoundTripErrorIsHalfASpacingOfTheScaledElement) {
  std::vector<float> x(4 * kMxBlock);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(std::sin(0.37 * double(i)) * std::pow(10.0, double(i / kMxBlock) - 2));
  for (Element e : {Element::E4M3, Element::E5M2, Element::E2M1}) {
    SCOPED_TRACE(element_name(e));
    const MxQuantized q = mx_quantize(x.data(), int64_t(x.size()), e);
    std::vector<float> out(x.size());
    mx_dequantize(q, out.data());
    const int mbits = e == Element::E4M3 ? 3 : e == Element::E5M2 ? 2 : 1;
    const int emin = e == Element::E4M3 ? -6 : e == Element::E5M2 ? -14 : 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double scale = decode_e8m0(q.scales[i / kMxBlock]);
      const double a = std::fabs(double(x[i])) / scale;  // < 2^(emax + 1): never saturated here
      const int exp = a == 0 ? emin : std::max(std::ilogb(a), emin);
      const double half_spacing = std::ldexp(0.5, exp - mbits) * scale;
      if (a <= element_max(e)) {
        EXPECT_LE(std::fabs(double(out[i]) - double(x[i])), half_spacing) << i;
      }
    }
  }
}

TEST(Mx, ZerosNaNsAndBadBlocks) {
  std::vector<float> zeros(kMxBlock, 0.0f), out(kMxBlock);
  const MxQuantized z = mx_quantize(zeros.data(), kMxBlock, Element::E4M3);
  EXPECT_EQ(z.scales[0], 0);
  mx_dequantize(z, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  std::vector<float> with_nan = block_of(NAN, 1.0f);
  mx_dequantize(mx_quantize(with_nan.data(), kMxBlock, Element::E2M1), out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  try {
    mx_quantize(zeros.data(), 16, Element::E4M3, 16);
    ADD_FAILURE() << "a block of 16 was accepted for MX";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks are 32 values"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mx_quantize(zeros.data(), 31, Element::E4M3), Error);  // not whole blocks
}

// --- NVFP4 ---

TEST(Nvfp4, TwoLevelScalesAsDefined) {
  // Written out from the definition: s_enc = 6 * 448 / amax; s_b = E4M3(amax_b / 6 * s_enc);
  // value = E2M1(v * s_enc / s_b) * s_b / s_enc.
  std::vector<float> x(2 * kNvfp4Block);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(std::cos(1.3 * double(i)) * (i < 16 ? 3.0 : 0.02));
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const Nvfp4Quantized q = nvfp4_quantize(x.data(), int64_t(x.size()), amax);
  EXPECT_FLOAT_EQ(q.tensor_scale, 2688.0f / amax);
  std::vector<float> out(x.size());
  nvfp4_dequantize(q, out.data());
  for (int b = 0; b < 2; ++b) {
    float block_amax = 0;
    for (int i = 0; i < 16; ++i)
      block_amax = std::max(block_amax, std::fabs(x[size_t(b * 16 + i)]));
    const float s_b = to_f32(to_f8e4m3(block_amax / 6.0f * q.tensor_scale));  // storage codec
    EXPECT_EQ(decode(Element::E4M3, q.scales[size_t(b)]), s_b) << b;
    for (int i = 0; i < 16; ++i) {
      const size_t k = size_t(b * 16 + i);
      // Nearest E2M1 magnitude by search over the eight (ties to the even code).
      const double target = std::fabs(double(x[k]) * q.tensor_scale / s_b);
      const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
      int best = 0;
      for (int m = 1; m < 8; ++m) {
        const double d = std::fabs(mags[m] - target), db = std::fabs(mags[best] - target);
        if (d < db || (d == db && m % 2 == 0)) best = m;
      }
      const double want = std::copysign(mags[best], double(x[k])) * s_b / q.tensor_scale;
      EXPECT_NEAR(out[k], want, 1e-6 * std::fabs(want)) << k;
    }
  }
  EXPECT_THROW(nvfp4_quantize(x.data(), 32, amax, 32), Error);
  EXPECT_THROW(nvfp4_quantize(x.data(), 32, NAN), Error);
}

// The f32 shortcut of the emulated GEMM operands against the codec, over a sweep of every
// 2^11-th f32 bit pattern (both signs, subnormals to infinity) and the NaNs.
TEST(Formats, FastRoundingAgreesWithTheCodec) {
  for (Element e : {Element::E4M3, Element::E5M2, Element::E2M1})
    for (float u : {-1.0f, 0.0f, 0.3f, 0.999f}) {
      int64_t checked = 0;
      for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 2048 + 1) {
        const uint32_t b32 = uint32_t(bits);
        float x;
        std::memcpy(&x, &b32, 4);
        const float codec = round_to(e, x, u), fast = round_to_fast(e, x, u);
        if (std::isnan(codec)) {
          ASSERT_TRUE(std::isnan(fast)) << element_name(e) << " " << x;
        } else {
          uint32_t want, got;
          std::memcpy(&want, &codec, 4);
          std::memcpy(&got, &fast, 4);
          ASSERT_EQ(got, want) << element_name(e) << " x=" << x << " u=" << u;
        }
        ++checked;
      }
      EXPECT_GT(checked, 2000000);
    }
}

}  // namespace
}  // namespace loom::precision
