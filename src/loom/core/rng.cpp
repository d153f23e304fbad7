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
  std::array<uint32_t, 4> out;
  philox4x32_10(counter_lo, counter_hi, key, out.data());
  return out;
}

}  // namespace loom
