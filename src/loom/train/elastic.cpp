#include "loom/train/elastic.h"

#include "loom/core/error.h"

namespace loom::train {

namespace {
// The data-parallel degree of `dims` on `world` ranks, or 0 where it does not resolve.
int64_t dp_on(const dist::ParallelDims& dims, int64_t world) {
  try {
    return dims.resolved(world).dp();
  } catch (const Error&) {
    return 0;
  }
}
}  // namespace

std::optional<ElasticLayout> elastic_layout(const dist::ParallelDims& asked, int64_t batch_size,
                                            int64_t grad_accum, int64_t world, int64_t most,
                                            int64_t min_ranks, bool diloco) {
  // DiLoCo: each worker keeps its layout, the number of workers is what the world fills.
  dist::ParallelDims dims = asked;
  if (diloco) {
    if (dp_on(asked, world) == 0) return std::nullopt;
    dims = asked.resolved(world);
    dims.dp_replicate = -1;
  }
  const int64_t dp = dp_on(dims, world);
  if (dp == 0 || batch_size % dp != 0) return std::nullopt;
  const int64_t global = batch_size * grad_accum, share = batch_size / dp;
  for (int64_t n = most; n >= std::max<int64_t>(min_ranks, 1); --n) {
    const int64_t d = dp_on(dims, n);
    if (d == 0) continue;
    for (int64_t a = 1; a <= global / d; ++a) {
      if (global % (d * a) != 0) continue;
      if (global / (d * a) <= share)
        return ElasticLayout{n, global / a, a, diloco ? dims.resolved(n).dp_replicate : 0};
    }
  }
  return std::nullopt;
}

}  // namespace loom::train
