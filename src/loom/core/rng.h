// Counter-based Philox4x32-10 random numbers, keyed so that values depend only on
// (seed, purpose, name, global element index) and never on how a tensor is sharded.
#pragma once
#include <math.h>

#include <array>
#include <cstdint>
#include <string>

#include "loom/core/host_device.h"

namespace loom {

// Identifies one random stream: e.g. {seed, "init", "blocks.3.attn.qkv.weight"}.
struct RngKey {
  uint64_t seed = 0;
  std::string purpose;
  std::string name;
  uint64_t hash() const;  // stable 64-bit Philox key (FNV-1a over the fields, then mixed)
};

// Philox4x32-10, inline for device code too (every backend draws the same bits).
LOOM_HD inline void philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t key,
                                  uint32_t out[4]) {
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
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}
std::array<uint32_t, 4> philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

// Value number `index` of the stream `key` (the stream is an infinite sequence).
LOOM_HD inline float uniform_at(uint64_t key, uint64_t index) {  // in [0, 1)
  uint32_t r[4];
  philox4x32_10(index, 0, key, r);
  return float(double(r[0] >> 8) * (1.0 / 16777216.0));
}
LOOM_HD inline float normal_at(uint64_t key, uint64_t index) {  // standard normal (Box-Muller)
  uint32_t r[4];
  philox4x32_10(index, 0, key, r);
  // 53-bit uniforms; u1 in (0, 1] so the log is finite.
  const double u1 =
      (double((uint64_t(r[0]) << 21) ^ (r[1] >> 11)) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = double((uint64_t(r[2]) << 21) ^ (r[3] >> 11)) * (1.0 / 9007199254740992.0);
  return float(::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2));
}

}  // namespace loom
