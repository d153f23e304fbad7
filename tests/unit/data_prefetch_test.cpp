// Prefetcher: in-order delivery, bounded read-ahead, producer exceptions surface in next(),
// and destruction never waits for a consumer.
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/prefetch.h"

namespace {

using loom::Prefetcher;
using Clock = std::chrono::steady_clock;

TEST(DataPrefetch, YieldsProducerResultsInOrder) {
  int counter = 0;  // touched only by the producer thread
  Prefetcher<int> p([&] { return counter++; }, 3);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(p.next(), i);
}

TEST(DataPrefetch, ResetDropsWhatIsReadyAndGoesOnFromTheNewState) {
  int counter = 0;  // the producer's state: changed only inside reset()'s reposition
  Prefetcher<int> p(
      [&] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        return counter++;
      },
      3);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(p.next(), i);
  p.reset([&] { counter = 100; });  // batches 5.. made ahead are dropped
  for (int i = 100; i < 110; ++i) ASSERT_EQ(p.next(), i);
  p.reset([&] { counter = 2; });
  ASSERT_EQ(p.next(), 2);
}

TEST(DataPrefetch, ReadsAheadAtMostDepth) {
  std::atomic<int> produced{0};
  Prefetcher<int> p([&] { return produced++; }, 2);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (produced < 2 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(produced.load(), 2) << "the queue should hold exactly `depth` batches";
  EXPECT_EQ(p.next(), 0);
}

TEST(DataPrefetch, MoveOnlyBatches) {
  int counter = 0;
  Prefetcher<std::unique_ptr<int>> p([&] { return std::make_unique<int>(counter++); });
  EXPECT_EQ(*p.next(), 0);
  EXPECT_EQ(*p.next(), 1);
}

TEST(DataPrefetch, RethrowsProducerExceptionAfterEarlierBatches) {
  int counter = 0;
  Prefetcher<int> p([&] {
    if (counter == 3) throw std::runtime_error("shard 3 is corrupt");
    return counter++;
  });
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(p.next(), 1);
  EXPECT_EQ(p.next(), 2);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      p.next();
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "shard 3 is corrupt");
    }
  }
  // loom::Error keeps its type through the thread hop.
  Prefetcher<int> q([]() -> int {
    LOOM_CHECK(false) << "bad batch";
    return 0;
  });
  EXPECT_THROW(q.next(), loom::Error);
}

TEST(DataPrefetch, DestructorDoesNotHang) {
  const auto start = Clock::now();
  {
    // Queue full and nobody consuming: the worker waits for space and must still stop.
    Prefetcher<int> full([] { return 1; }, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    // Destroyed while the producer is mid-call: waits for that one call only.
    Prefetcher<int> slow([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      return 1;
    });
  }
  {
    Prefetcher<int> failed([]() -> int { throw std::runtime_error("x"); });
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);
}

}  // namespace
