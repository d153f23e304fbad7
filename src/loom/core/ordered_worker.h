// One background thread that runs posted jobs in the order they were posted, and lets a caller
// wait for only the jobs posted under some keys. ZeRO-3's offloaded optimizer step uses it: the
// host updates the shard piece by piece while the next forward runs, and each unit's gather
// waits for its own pieces alone (parallel/zero.h).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class OrderedWorker {
 public:
  OrderedWorker() = default;
  ~OrderedWorker();  // runs what is posted, then stops the thread
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;

  // Queues job under key (the thread starts at the first post).
  void post(size_t key, std::function<void()> job);
  // Returns once every job posted so far under a key in [begin, end) has run (and the jobs
  // before them: they run in order). Rethrows the first error a job threw, at this and every
  // later wait; the jobs queued behind it are dropped.
  void wait_keys(size_t begin, size_t end);
  void wait_all();
  // Jobs posted and not yet finished.
  int64_t pending() const;

 private:
  void wait_for(uint64_t target, std::unique_lock<std::mutex>& lock);
  void run();

  mutable std::mutex mu_;
  std::condition_variable posted_cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<uint64_t> last_of_key_;  // the number of the last job posted under each key
  uint64_t posted_ = 0, done_ = 0;     // jobs numbered from 1
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace loom
