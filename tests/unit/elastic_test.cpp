// The layout of an elastic restart: the largest world the parallel degrees allow, the global
// batch kept in the fewest micro-batches no larger per rank than before. Expected values worked
// out by hand from the rule.
#include "loom/train/elastic.h"

#include <gtest/gtest.h>

namespace loom::train {
namespace {

dist::ParallelDims data_parallel() {
  return dist::ParallelDims{};  // dp_shard = -1: every rank data-parallel
}

TEST(ElasticLayout, KeepsTheGlobalBatchOnTheLargestWorldThatSplitsIt) {
  // 8 samples on 4 ranks (2 each): 3 ranks cannot split 8; 2 ranks take 2 each in 2 micro-batches.
  auto l = elastic_layout(data_parallel(), 8, 1, 4, 3, 2);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 2);
  EXPECT_EQ(l->batch_size, 4);
  EXPECT_EQ(l->grad_accum, 2);
  // 12 on 4 ranks (3 each): 3 ranks take 2 each in 2 micro-batches (4 each in one would be more
  // than 3).
  l = elastic_layout(data_parallel(), 12, 1, 4, 3, 2);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 3);
  EXPECT_EQ(l->batch_size, 6);
  EXPECT_EQ(l->grad_accum, 2);
  // Already accumulating: 4 x 2 on 4 ranks (1 each) -> 2 ranks: 2 x 4.
  l = elastic_layout(data_parallel(), 4, 2, 4, 3, 1);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 2);
  EXPECT_EQ(l->batch_size, 2);
  EXPECT_EQ(l->grad_accum, 4);
}

TEST(ElasticLayout, DiLoCoGoesOnWithFewerWorkersOfTheSameLayout) {
  dist::ParallelDims workers4;  // 4 DiLoCo workers, dp_shard filled by the world
  workers4.dp_replicate = 4;
  // 4 ranks (1 per worker, 2 samples each) lose one: 3 workers cannot split 8, 2 take 2 each in
  // 2 micro-batches.
  EXPECT_FALSE(elastic_layout(workers4, 8, 1, 4, 3, 1, /*diloco=*/false));  // 4 workers kept
  auto l = elastic_layout(workers4, 8, 1, 4, 3, 1, /*diloco=*/true);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 2);
  EXPECT_EQ(l->workers, 2);
  EXPECT_EQ(l->batch_size, 4);
  EXPECT_EQ(l->grad_accum, 2);
  // 8 ranks (2 per worker, 1 sample each) lose one: 6 ranks are 3 workers of 2 (8 does not
  // split), 4 ranks 2 workers of 2, 2 samples each in 2 micro-batches. Without DiLoCo the same
  // degrees keep 4 workers and shrink each.
  l = elastic_layout(workers4, 8, 1, 8, 7, 1, true);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 4);
  EXPECT_EQ(l->workers, 2);
  EXPECT_EQ(l->batch_size, 4);
  EXPECT_EQ(l->grad_accum, 2);
  l = elastic_layout(workers4, 8, 1, 8, 7, 1, false);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 4);
  EXPECT_EQ(l->workers, 0);
  // 4 samples on 4 workers: 2 workers, 1 sample each in 2 micro-batches.
  l = elastic_layout(workers4, 4, 1, 4, 3, 1, true);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 2);
  EXPECT_EQ(l->workers, 2);
}

TEST(ElasticLayout, KeepsTheModelParallelDegrees) {
  dist::ParallelDims tp2;
  tp2.tp = 2;
  // 8 ranks of tp 2 (dp 4, 2 samples each) lose one: 7, 6 (dp 3: 8 does not split) -> 4 (dp 2).
  auto l = elastic_layout(tp2, 8, 1, 8, 7, 2);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 4);
  EXPECT_EQ(l->batch_size, 4);
  EXPECT_EQ(l->grad_accum, 2);
  // tp 2 x pp 2 on 8 (dp 2, 4 samples each): 4 ranks (dp 1) in 2 micro-batches; fewer than
  // tp x pp: none.
  dist::ParallelDims tp2pp2 = tp2;
  tp2pp2.pp = 2;
  l = elastic_layout(tp2pp2, 8, 1, 8, 7, 2);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->processes, 4);
  EXPECT_EQ(l->batch_size, 4);
  EXPECT_EQ(l->grad_accum, 2);
  EXPECT_FALSE(elastic_layout(tp2pp2, 8, 1, 8, 3, 1));
}

TEST(ElasticLayout, NoneBelowTheMinimumOrForAFixedWorld) {
  EXPECT_FALSE(elastic_layout(data_parallel(), 8, 1, 4, 3, 3));  // 3 cannot split 8
  dist::ParallelDims fixed;
  fixed.dp_shard = 4;  // every degree fixed: only 4 ranks resolve
  EXPECT_FALSE(elastic_layout(fixed, 8, 1, 4, 3, 1));
}

}  // namespace
}  // namespace loom::train
