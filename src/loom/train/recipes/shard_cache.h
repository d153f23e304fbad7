// Tensors made once in shards and kept in a directory for every later run (a latent cache, the
// preference pairs of Diffusion-DPO): the data-parallel ranks make the missing shards between
// them, each shard's files written under temporary names and renamed into place, so a run cut
// short leaves whole shards and the next one makes only the rest; then every rank reads all.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"

namespace loom::train {

struct ShardCache {
  std::string dir;
  int64_t count = 0;               // items in all
  int64_t shard = 0;               // items per shard (the last may hold fewer)
  std::vector<std::string> parts;  // each shard's files: shard-NNNNN.npy ("") or shard-NNNNN.P.npy
};

struct ShardCacheRead {
  std::vector<Tensor> parts;  // each part's shards concatenated along dim 0: (count, ...)
  int64_t made = 0;           // items made by this call (all ranks'), the others read
};

// make(first, n): the parts of items [first, first + n), each (n, ...). Collective over `dp`.
ShardCacheRead read_or_make_shards(
    const ShardCache& cache, dist::ProcessGroup& dp,
    const std::function<std::vector<Tensor>(int64_t first, int64_t n)>& make);

}  // namespace loom::train
