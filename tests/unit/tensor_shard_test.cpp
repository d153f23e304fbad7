// TensorShard: a tensor-parallel rank's part of a parameter. Its copy (take) and its element
// runs (what checkpoints and gathers use) agree with the whole tensor indexed element by element,
// for row splits, column splits and attention's three-block qkv split; the parts of all ranks
// cover the whole exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "loom/ops/ops.h"
#include "loom/parallel/tensor_parallel.h"

namespace {

using loom::parallel::TensorShard;

// Whole (R, C) with element (i, j) = i * 1000 + j, so a value names its position.
loom::Tensor numbered(int64_t R, int64_t C) {
  std::vector<float> v;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) v.push_back(float(i * 1000 + j));
  return loom::from_vector(v, {R, C});
}

void check_shard(const TensorShard& s, int64_t P) {
  const int64_t R = s.whole_shape[0], C = s.whole_shape[1];
  const loom::Tensor whole = numbered(R, C);
  std::vector<int> covered(size_t(R * C), 0);
  for (int64_t q = 0; q < P; ++q) {
    const loom::Tensor part = s.take(whole, q);
    ASSERT_EQ(part.shape(), s.shape(q));
    const std::vector<float> local = loom::to_vector(part);
    // Element by element: local (i, j) is whole (block row, j) or (i, block column).
    const int64_t lr = part.size(0), lc = part.size(1);
    std::vector<int64_t> index;  // whole index along s.dim of each local index
    for (const auto& [start, length] : s.blocks[size_t(q)])
      for (int64_t k = 0; k < length; ++k) index.push_back(start + k);
    for (int64_t i = 0; i < lr; ++i)
      for (int64_t j = 0; j < lc; ++j) {
        const int64_t wi = s.dim == 0 ? index[size_t(i)] : i,
                      wj = s.dim == 1 ? index[size_t(j)] : j;
        ASSERT_EQ(local[size_t(i * lc + j)], float(wi * 1000 + wj))
            << "rank " << q << " at " << i << "," << j;
      }
    // The runs say the same, and together the ranks' runs cover the whole once.
    int64_t total = 0;
    for (const auto& run : s.runs(q)) {
      for (int64_t k = 0; k < run.length; ++k) {
        const int64_t w = run.whole + k;
        EXPECT_EQ(local[size_t(run.local + k)], float((w / C) * 1000 + w % C));
        ++covered[size_t(w)];
      }
      total += run.length;
    }
    EXPECT_EQ(total, part.numel());
  }
  for (int64_t w = 0; w < R * C; ++w) ASSERT_EQ(covered[size_t(w)], 1) << "element " << w;
}

TEST(TensorShard, RowSplitIsOneRunPerRank) {
  TensorShard s{{8, 3}, 0, {{{0, 4}}, {{4, 4}}}};
  check_shard(s, 2);
  EXPECT_EQ(s.runs(1).size(), 1u);
  EXPECT_EQ(s.runs(1)[0].whole, 12);
}

TEST(TensorShard, ColumnSplitIsOneRunPerRow) {
  TensorShard s{{5, 8}, 1, {{{0, 2}}, {{2, 2}}, {{4, 2}}, {{6, 2}}}};
  check_shard(s, 4);
  EXPECT_EQ(s.runs(2).size(), 5u);
}

TEST(TensorShard, AttentionQkvSplitTakesEachRanksHeadsOfQKAndV) {
  // 4 query heads, 2 key/value heads, head dim 2, over 2 ranks: rows [q | k | v] = 8 + 4 + 4.
  TensorShard s{{16, 3}, 0, {{{0, 4}, {8, 2}, {12, 2}}, {{4, 4}, {10, 2}, {14, 2}}}};
  check_shard(s, 2);
  EXPECT_EQ(s.shape(0), (loom::Shape{8, 3}));
}

}  // namespace
