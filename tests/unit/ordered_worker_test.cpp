// OrderedWorker: jobs run in the order posted, on one thread; a wait for some keys returns
// while a later job is still blocked; a job's error reaches every later wait and drops the
// jobs queued behind it.
#include "loom/core/ordered_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

namespace loom {
namespace {

TEST(OrderedWorker, RunsInOrderAndWaitsOnlyForTheKeysAsked) {
  OrderedWorker worker;
  std::vector<int> ran;  // written by the worker alone, read after a wait
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  for (int k = 0; k < 5; ++k) worker.post(size_t(k), [&ran, k] { ran.push_back(k); });
  std::atomic<bool> blocked_ran{false};
  worker.post(7, [released, &blocked_ran] {
    released.wait_for(std::chrono::seconds(10));
    blocked_ran = true;
  });
  worker.wait_keys(0, 5);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  worker.wait_keys(5, 7);  // nothing posted under 5 or 6
  EXPECT_EQ(worker.pending(), 1) << "a wait for other keys waited for the blocked job";
  EXPECT_FALSE(blocked_ran);
  release.set_value();
  worker.wait_keys(7, 8);
  EXPECT_TRUE(blocked_ran);
  // A key posted again: its wait is for the newest job.
  worker.post(1, [&ran] { ran.push_back(10); });
  worker.wait_keys(1, 2);
  EXPECT_EQ(ran.back(), 10);
  EXPECT_EQ(worker.pending(), 0);
}

TEST(OrderedWorker, AnErrorReachesEveryLaterWaitAndDropsTheQueue) {
  OrderedWorker worker;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> after_ran{false};
  worker.post(0, [released] {
    released.wait();
    throw std::runtime_error("update failed");
  });
  worker.post(1, [&after_ran] { after_ran = true; });
  release.set_value();
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      worker.wait_all();
      ADD_FAILURE() << "the job's error was not rethrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "update failed");
    }
  }
  EXPECT_THROW(worker.wait_keys(1, 2), std::runtime_error);
  EXPECT_FALSE(after_ran) << "a job queued behind the failed one ran";
  EXPECT_EQ(worker.pending(), 0);
}

TEST(OrderedWorker, DestructionRunsWhatIsPosted) {
  std::atomic<int> ran{0};
  {
    OrderedWorker worker;
    for (int k = 0; k < 3; ++k)
      worker.post(0, [&ran] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ++ran;
      });
  }
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace loom
