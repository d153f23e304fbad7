// XXH64 of bytes (libxxhash): checkpoint checksums, the ranks' agreement on one config, replica
// weight comparisons.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

uint64_t xxh64(const void* data, size_t nbytes, uint64_t seed = 0);
std::string xxh64_hex(const void* data, size_t nbytes);  // 16 lowercase hex digits

}  // namespace loom
