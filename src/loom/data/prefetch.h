// Prefetcher<Batch>: runs a producer on a background thread so the next batches are ready
// when the training step asks for them.
//
// Up to `depth` produced batches wait in a bounded queue; next() hands them out in production
// order. If the producer throws, the batches made before the failure are still handed out, then
// next() rethrows that exception (every call after as well) and production stops. The
// destructor stops production and joins; it waits for a producer call already in progress
// (a producer cannot be interrupted), never for queue space. reset(reposition) discards what is
// ready and moves the producer's state (a rollback replays earlier steps' data).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/trace.h"

namespace loom {

template <typename Batch>
class Prefetcher {
 public:
  explicit Prefetcher(std::function<Batch()> producer, size_t depth = 2)
      : producer_(std::move(producer)), depth_(depth) {
    LOOM_CHECK(depth_ > 0) << "Prefetcher: depth = 0, expected at least 1";
    LOOM_CHECK(producer_ != nullptr) << "Prefetcher: empty producer function";
    worker_ = std::thread([this] { run(); });  // started last: every member is ready
  }

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    space_cv_.notify_all();
    worker_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  Batch next() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (ready_.empty() && error_ == nullptr) {  // the step waits for data: time it
      trace::Scope scope("data_wait", "data");
      const auto start = std::chrono::steady_clock::now();
      ready_cv_.wait(lock, [this] { return !ready_.empty() || error_ != nullptr; });
      waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (ready_.empty()) std::rethrow_exception(error_);
    Batch batch = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    space_cv_.notify_one();
    return batch;
  }
  // Drops the ready batches and, with production paused (after a producer call in progress),
  // runs reposition() -- where the producer's state is changed -- then production goes on
  // from there.
  void reset(const std::function<void()>& reposition) {
    std::unique_lock<std::mutex> lock(mutex_);
    paused_ = true;
    idle_cv_.wait(lock, [this] { return !producing_; });
    ready_.clear();
    reposition();
    paused_ = false;
    lock.unlock();
    space_cv_.notify_all();
  }
  // Seconds next() has spent waiting for the producer (the step was starved of data).
  double waited_seconds() const { return waited_s_; }

 private:
  void run() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        space_cv_.wait(lock, [this] { return stopping_ || (!paused_ && ready_.size() < depth_); });
        if (stopping_) return;
        producing_ = true;
      }
      try {
        Batch batch = producer_();  // outside the lock: next() can take ready batches meanwhile
        std::lock_guard<std::mutex> lock(mutex_);
        producing_ = false;
        if (!paused_) ready_.push_back(std::move(batch));  // else made before a reset: dropped
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        producing_ = false;
        error_ = std::current_exception();
        ready_cv_.notify_all();
        idle_cv_.notify_all();
        return;
      }
      idle_cv_.notify_all();
      ready_cv_.notify_one();
    }
  }

  std::function<Batch()> producer_;
  const size_t depth_;
  std::mutex mutex_;
  std::condition_variable ready_cv_;  // a batch or an error arrived
  std::condition_variable space_cv_;  // the queue has room, or the destructor wants a stop
  std::condition_variable idle_cv_;   // a producer call ended (reset() waits for it)
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
  bool paused_ = false, producing_ = false;
  double waited_s_ = 0;  // next()'s thread only
  std::thread worker_;
};

}  // namespace loom
