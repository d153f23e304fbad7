// cpu::store_bf16 (vec_math.h), the row rounding of the CPU kernels, against to_bf16 itself
// (whose exactness dtype_test.cpp checks against an independent reference): the same bits for
// every kind of value, in every position of a row and for every row length around the width of
// the vector path (16), including groups that mix subnormals into normal values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "loom/backend/cpu/vec_math.h"

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values of every class: zeros, subnormals (smallest, largest, ones that round up to the
// smallest normal bf16), normals at rounding ties either way, the largest finite values (one
// rounds to infinity), infinities and NaNs (quiet, signalling, negative).
std::vector<float> special_values() {
  std::vector<uint32_t> bits = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00008000,
                                0x00008001, 0x007fffff, 0x807fffff, 0x007f8000, 0x00800000,
                                0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f807fff, 0xbf808000,
                                0x7f7fffff, 0x7f7f7fff, 0xff7fffff, 0x7f800000, 0xff800000,
                                0x7fc00000, 0x7f800001, 0xffc00001, 0x7fbfffff};
  std::vector<float> out;
  for (uint32_t u : bits) out.push_back(from_bits(u));
  return out;
}

std::vector<uint16_t> expected(const std::vector<float>& x) {
  std::vector<uint16_t> out;
  for (float v : x) out.push_back(loom::to_bf16(v).bits);
  return out;
}

std::vector<uint16_t> stored(const std::vector<float>& x) {
  std::vector<loom::bf16> out(x.size(), loom::bf16{0xdead});
  loom::cpu::store_bf16(x.data(), out.data(), int64_t(x.size()));
  std::vector<uint16_t> bits;
  for (loom::bf16 v : out) bits.push_back(v.bits);
  return bits;
}

TEST(CpuStoreBf16, SameBitsAsToBf16ForEveryKindOfValue) {
  const std::vector<float> special = special_values();
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n = 0; n <= 50; ++n) {
    for (size_t at = 0; at < special.size(); ++at) {
      // Normal values with one special value at a moving position (a whole 16-wide group
      // takes the exact path when one of its values is subnormal).
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng);
      if (n > 0) x[(at * 7) % size_t(n)] = special[at];
      ASSERT_EQ(stored(x), expected(x)) << "n " << n << ", special value " << at;
    }
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = from_bits(any_bits(rng));
    ASSERT_EQ(stored(x), expected(x)) << "random bits, n " << n;
  }
}

TEST(CpuStoreBf16, WritesExactlyNValues) {
  std::vector<float> x(37, 1.5f);
  std::vector<loom::bf16> out(40, loom::bf16{0xdead});
  loom::cpu::store_bf16(x.data(), out.data(), 37);
  for (size_t i = 37; i < out.size(); ++i) EXPECT_EQ(out[i].bits, 0xdead) << i;
  EXPECT_EQ(out[36].bits, loom::to_bf16(1.5f).bits);
}

}  // namespace
