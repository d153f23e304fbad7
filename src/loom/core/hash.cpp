#include "loom/core/hash.h"

#include <xxhash.h>

#include <cstdio>

namespace loom {

uint64_t xxh64(const void* data, size_t nbytes, uint64_t seed) {
  return XXH64(data, nbytes, seed);
}

std::string xxh64_hex(const void* data, size_t nbytes) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)XXH64(data, nbytes, 0));
  return buf;
}

}  // namespace loom
