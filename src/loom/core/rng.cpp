#include "loom/core/rng.h"

#include <cmath>

namespace loom {

uint64_t RngKey::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix_byte = [&](uint8_t b) {
    h ^= b;
    h *= 0x100000001b3ull;
  };
  for (int i = 0; i < 8; ++i) mix_byte(uint8_t(seed >> (8 * i)));
  for (char c : purpose) mix_byte(uint8_t(c));
  mix_byte(0xff);  // separator so ("ab","c") != ("a","bc")
  for (char c : name) mix_byte(uint8_t(c));
  // splitmix64 finaliser spreads the FNV state over all bits.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::array<uint32_t, 4> philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  // Constants from Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0;
    const uint64_t p1 = uint64_t(kMul1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

float normal_at(uint64_t key, uint64_t index) {
  auto r = philox4x32_10(index, 0, key);
  // 53-bit uniforms; u1 in (0, 1] so the log is finite.
  const double u1 =
      (double((uint64_t(r[0]) << 21) ^ (r[1] >> 11)) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = double((uint64_t(r[2]) << 21) ^ (r[3] >> 11)) * (1.0 / 9007199254740992.0);
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace loom
