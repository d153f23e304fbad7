#include "loom/train/recipes/shard_cache.h"

#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include "loom/data/npy.h"
#include "loom/ops/ops.h"
#include "loom/train/recipe.h"

namespace loom::train {

namespace fs = std::filesystem;

ShardCacheRead read_or_make_shards(
    const ShardCache& cache, dist::ProcessGroup& dp,
    const std::function<std::vector<Tensor>(int64_t first, int64_t n)>& make) {
  fs::create_directories(cache.dir);
  const int64_t shards = (cache.count + cache.shard - 1) / cache.shard;
  auto path = [&](int64_t s, const std::string& part) {
    char name[32];
    std::snprintf(name, sizeof name, "/shard-%05lld", (long long)s);
    return cache.dir + name + (part.empty() ? "" : "." + part) + ".npy";
  };
  auto size = [&](int64_t s) { return std::min(cache.shard, cache.count - s * cache.shard); };
  auto whole = [&](int64_t s) {
    for (const std::string& part : cache.parts)
      if (!fs::exists(path(s, part)) || read_npy(path(s, part)).size(0) < size(s)) return false;
    return true;
  };
  int64_t made = 0;
  for (int64_t s = dp.rank(); s < shards; s += dp.size()) {
    if (whole(s)) continue;
    const std::vector<Tensor> parts = make(s * cache.shard, size(s));
    LOOM_CHECK(parts.size() == cache.parts.size())
        << "shard cache " << cache.dir << ": " << parts.size() << " parts made, "
        << cache.parts.size() << " expected";
    // Tensor-parallel ranks of one dp rank make the same shard: each under its own names.
    const std::string tmp = ".tmp-" + std::to_string(::getpid());
    for (size_t k = 0; k < parts.size(); ++k) write_npy(path(s, cache.parts[k]) + tmp, parts[k]);
    for (const std::string& part : cache.parts) fs::rename(path(s, part) + tmp, path(s, part));
    made += size(s);
  }
  ShardCacheRead out;
  out.made = int64_t(sum_over(dp, {double(made)})[0]);  // also: every shard is in place
  for (const std::string& part : cache.parts) {
    std::vector<Tensor> pieces;
    for (int64_t s = 0; s < shards; ++s)
      pieces.push_back(narrow(read_npy(path(s, part)), 0, 0, size(s)));
    out.parts.push_back(contiguous(cat(pieces, 0)));
  }
  return out;
}

}  // namespace loom::train
