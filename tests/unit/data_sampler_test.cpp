// Sampler: permutation per epoch, order a function of (seed, epoch) only, exact resume, and a
// rank split that tiles the global batch.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/sampler.h"

namespace {

using loom::Sampler;

std::vector<int64_t> draw(Sampler& s, int batches) {
  std::vector<int64_t> out;
  for (int b = 0; b < batches; ++b) {
    const std::vector<int64_t> batch = s.next_batch();
    EXPECT_EQ(int64_t(batch.size()), s.batch_size());
    out.insert(out.end(), batch.begin(), batch.end());
  }
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), int64_t(0));
  return v == expected;
}

TEST(DataSampler, EveryIndexOncePerEpochAcrossBatchBoundaries) {
  const int64_t n = 103;  // not a multiple of the batch size: batches straddle epochs
  Sampler s(n, 10, 42);
  const std::vector<int64_t> stream = draw(s, 31);  // 310 entries: 3 full epochs and 1 more
  for (int64_t e = 0; e < 3; ++e) {
    const std::vector<int64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n);
    EXPECT_TRUE(is_permutation_of_range(epoch, n)) << "epoch " << e;
    EXPECT_EQ(epoch, s.epoch_order(e)) << "epoch " << e;
  }
  EXPECT_EQ(s.state(), (Sampler::State{3, 1}));
}

TEST(DataSampler, OrderDependsOnlyOnSeedAndEpoch) {
  Sampler a(1000, 32, 7), b(1000, 32, 7), c(1000, 32, 8);
  const std::vector<int64_t> sa = draw(a, 40), sb = draw(b, 40), sc = draw(c, 40);
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  EXPECT_TRUE(is_permutation_of_range(a.epoch_order(5), 1000));
  // Jumping straight to epoch 5 sees what a sampler that ran through epochs 0..4 sees.
  Sampler jump(1000, 100, 7);
  jump.set_state({5, 0});
  Sampler walk(1000, 100, 7);
  draw(walk, 50);
  EXPECT_EQ(walk.state(), (Sampler::State{5, 0}));
  EXPECT_EQ(draw(jump, 10), draw(walk, 10));
  // Large datasets shuffle too (indices beyond 2^24 reachable in principle; here 10^5).
  Sampler big(100000, 1, 1);
  const std::vector<int64_t> order = big.epoch_order(0);
  EXPECT_TRUE(is_permutation_of_range(order, 100000));
  EXPECT_NE(order[0], 0);
}

TEST(DataSampler, ResumeMidEpochContinuesExactly) {
  Sampler full(257, 16, 99);
  const std::vector<int64_t> uninterrupted = draw(full, 40);

  Sampler first(257, 16, 99);
  std::vector<int64_t> resumed = draw(first, 13);  // stops mid-epoch
  const Sampler::State saved = first.state();
  EXPECT_EQ(saved, (Sampler::State{0, 13 * 16}));
  Sampler second(257, 16, 99);  // a fresh process after a restart
  second.set_state(saved);
  const std::vector<int64_t> rest = draw(second, 27);
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  EXPECT_EQ(resumed, uninterrupted);
}

TEST(DataSampler, NoShuffleIsIdentityOrder) {
  Sampler s(5, 3, 1, /*shuffle=*/false);
  EXPECT_EQ(draw(s, 4), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}));
}

TEST(DataSampler, RankSplitTilesTheGlobalBatch) {
  const int64_t n = 50, batch = 3, world = 4;
  Sampler global(n, batch * world, 5);
  std::vector<Sampler> ranks;
  for (int64_t r = 0; r < world; ++r) ranks.emplace_back(n, batch, 5, true, r, world);
  for (int step = 0; step < 12; ++step) {  // crosses several epoch boundaries
    const std::vector<int64_t> g = global.next_batch();
    std::vector<int64_t> tiled(g.size(), -1);
    for (int64_t r = 0; r < world; ++r) {
      const std::vector<int64_t> mine = ranks[size_t(r)].next_batch();
      ASSERT_EQ(int64_t(mine.size()), batch);
      for (int64_t i = 0; i < batch; ++i) tiled[size_t(r * batch + i)] = mine[size_t(i)];
      EXPECT_EQ(ranks[size_t(r)].state(), global.state()) << "rank " << r;
    }
    EXPECT_EQ(tiled, g) << "step " << step;
  }
}

TEST(DataSampler, RejectsBadArguments) {
  EXPECT_THROW(Sampler(0, 1, 0), loom::Error);
  EXPECT_THROW(Sampler(10, 0, 0), loom::Error);
  EXPECT_THROW(Sampler(10, 1, 0, true, 2, 2), loom::Error);
  Sampler s(10, 2, 0);
  EXPECT_THROW(s.set_state({0, 10}), loom::Error);
  EXPECT_THROW(s.set_state({-1, 0}), loom::Error);
}

}  // namespace
