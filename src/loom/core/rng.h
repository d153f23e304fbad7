// Counter-based Philox4x32-10 random numbers, keyed so that values depend only on
// (seed, purpose, name, global element index) and never on how a tensor is sharded.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace loom {

// Identifies one random stream: e.g. {seed, "init", "blocks.3.attn.qkv.weight"}.
struct RngKey {
  uint64_t seed = 0;
  std::string purpose;
  std::string name;
  uint64_t hash() const;  // stable 64-bit Philox key (FNV-1a over the fields, then mixed)
};

std::array<uint32_t, 4> philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

// Value number `index` of the stream `key` (the stream is an infinite sequence).
inline float uniform_at(uint64_t key, uint64_t index) {  // in [0, 1)
  auto r = philox4x32_10(index, 0, key);
  return float(double(r[0] >> 8) * (1.0 / 16777216.0));
}
float normal_at(uint64_t key, uint64_t index);  // standard normal (Box-Muller)

}  // namespace loom
