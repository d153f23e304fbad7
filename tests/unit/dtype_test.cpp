// Exactness of the bf16 / f16 / fp8 conversions against a brute-force reference: decode every
// encoding with an independent formula, then round each test value to the nearest decoded
// value (ties to the even encoding) and compare encodings bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/error.h"

namespace {

struct Format {
  const char* name;
  int ebits, mbits;
  bool has_inf;  // IEEE-style infinity (else: saturate, E4M3fn)
  std::function<uint32_t(float)> encode;
  std::function<float(uint32_t)> decode;
};

// Independent decoder: value = (-1)^s * 2^(e - bias) * (1 + m / 2^mbits), subnormals for e = 0.
double reference_decode(uint32_t bits, int ebits, int mbits, bool has_inf) {
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t s = bits >> (ebits + mbits), e = (bits >> mbits) & ((1u << ebits) - 1),
                 m = bits & ((1u << mbits) - 1);
  const double sign = s ? -1.0 : 1.0;
  if (e == (1u << ebits) - 1) {
    if (has_inf) return m == 0 ? sign * INFINITY : NAN;
    if (m == (1u << mbits) - 1) return NAN;
  }
  if (e == 0) return sign * std::ldexp(double(m), 1 - bias - mbits);
  return sign * std::ldexp(1.0 + double(m) / double(1u << mbits), int(e) - bias);
}

struct Table {
  std::vector<std::pair<double, uint32_t>> finite_positive;  // sorted by value
  std::vector<std::pair<double, uint32_t>> candidates;       // + infinity where it exists
  double max_finite;
  uint32_t inf_bits;
};

Table build_table(const Format& f) {
  Table t;
  const uint32_t count = 1u << (f.ebits + f.mbits);  // non-negative encodings
  for (uint32_t b = 0; b < count; ++b) {
    const double v = reference_decode(b, f.ebits, f.mbits, f.has_inf);
    if (std::isfinite(v)) t.finite_positive.push_back({v, b});
  }
  std::sort(t.finite_positive.begin(), t.finite_positive.end());
  t.max_finite = t.finite_positive.back().first;
  t.inf_bits = uint32_t((1u << f.ebits) - 1) << f.mbits;
  t.candidates = t.finite_positive;
  if (f.has_inf) {
    // Infinity behaves as the next value after max (2^(emax+1)), with an even encoding.
    const int bias = (1 << (f.ebits - 1)) - 1;
    t.candidates.push_back({std::ldexp(1.0, (1 << f.ebits) - 2 - bias + 1), t.inf_bits});
  }
  return t;
}

// Round-to-nearest-even by search; overflow goes to inf (IEEE) or saturates (no inf).
uint32_t reference_encode(double x, const Format& f, const Table& t) {
  const uint32_t sign = std::signbit(x) ? 1u << (f.ebits + f.mbits) : 0u;
  double a = std::fabs(x);
  if (std::isinf(a)) return sign | (f.has_inf ? t.inf_bits : t.finite_positive.back().second);
  const auto& candidates = t.candidates;
  if (!f.has_inf) a = std::min(a, t.max_finite);
  auto hi = std::lower_bound(candidates.begin(), candidates.end(), std::make_pair(a, 0u));
  if (hi == candidates.end()) return sign | candidates.back().second;
  if (hi->first == a || hi == candidates.begin()) return sign | hi->second;
  auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return sign | lo->second;
  if (dh < dl) return sign | hi->second;
  return sign | ((lo->second & 1u) == 0 ? lo->second : hi->second);
}

std::vector<Format> formats() {
  return {
      {"bf16", 8, 7, true, [](float x) { return uint32_t(loom::to_bf16(x).bits); },
       [](uint32_t b) { return loom::to_f32(loom::bf16{uint16_t(b)}); }},
      {"f16", 5, 10, true, [](float x) { return uint32_t(loom::to_f16(x).bits); },
       [](uint32_t b) { return loom::to_f32(loom::f16{uint16_t(b)}); }},
      {"f8e4m3", 4, 3, false, [](float x) { return uint32_t(loom::to_f8e4m3(x).bits); },
       [](uint32_t b) { return loom::to_f32(loom::f8e4m3{uint8_t(b)}); }},
      {"f8e5m2", 5, 2, true, [](float x) { return uint32_t(loom::to_f8e5m2(x).bits); },
       [](uint32_t b) { return loom::to_f32(loom::f8e5m2{uint8_t(b)}); }},
  };
}

TEST(DType, DecodeMatchesReferenceForEveryEncoding) {
  for (const Format& f : formats()) {
    const uint32_t n = 1u << (1 + f.ebits + f.mbits);
    for (uint32_t b = 0; b < n; ++b) {
      const double want = reference_decode(b, f.ebits, f.mbits, f.has_inf);
      const float got = f.decode(b);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " bits " << b;
      } else {
        EXPECT_EQ(double(got), want) << f.name << " bits " << b;
      }
    }
  }
}

TEST(DType, EncodeRoundsToNearestEvenAndSaturates) {
  std::mt19937 rng(std::random_device{}());
  for (const Format& f : formats()) {
    const Table t = build_table(f);
    std::vector<float> xs = {0.0f,     -0.0f,    1.0f,      -1.0f,           448.0f,
                             464.0f,   480.0f,   1e6f,      -1e6f,           57344.0f,
                             61440.0f, 65504.0f, 65520.0f,  1e-10f,          -1e-10f,
                             3.0e38f,  INFINITY, -INFINITY, 1.17549435e-38f, 1e-45f};
    // Every midpoint between neighbours (exact ties) and points just either side of it.
    for (size_t i = 0; i + 1 < t.finite_positive.size(); ++i) {
      const double mid = 0.5 * (t.finite_positive[i].first + t.finite_positive[i + 1].first);
      const float m = float(mid);
      if (double(m) != mid) continue;  // not representable in f32 (never for these formats)
      xs.push_back(m);
      xs.push_back(-m);
      xs.push_back(std::nextafter(m, 0.0f));
      xs.push_back(std::nextafter(m, INFINITY));
    }
    std::uniform_real_distribution<double> exponent(-30, 20), mantissa(1, 2);
    for (int i = 0; i < 20000; ++i) {
      float x = float(mantissa(rng) * std::pow(2.0, exponent(rng)));
      xs.push_back(i % 2 ? -x : x);
    }
    for (float x : xs) {
      const uint32_t want = reference_encode(double(x), f, t);
      EXPECT_EQ(f.encode(x), want) << f.name << " encoding " << x;
    }
    EXPECT_TRUE(std::isnan(f.decode(f.encode(NAN)))) << f.name << " NaN";
  }
}

TEST(DType, E4M3SaturatesAndE5M2Overflows) {
  EXPECT_EQ(loom::to_f32(loom::to_f8e4m3(1e9f)), 448.0f);
  EXPECT_EQ(loom::to_f32(loom::to_f8e4m3(-INFINITY)), -448.0f);
  EXPECT_TRUE(std::isinf(loom::to_f32(loom::to_f8e5m2(1e9f))));
  EXPECT_EQ(loom::to_f32(loom::to_f8e5m2(57344.0f)), 57344.0f);  // max finite e5m2
}

TEST(DType, NamesRoundTripAndUnknownNameThrows) {
  for (auto d : {loom::DType::F32, loom::DType::BF16, loom::DType::F16, loom::DType::F8E4M3,
                 loom::DType::F8E5M2, loom::DType::I32, loom::DType::I64, loom::DType::U8})
    EXPECT_EQ(loom::dtype_from_name(loom::dtype_name(d)), d);
  EXPECT_THROW(loom::dtype_from_name("float128"), loom::Error);
}

}  // namespace
