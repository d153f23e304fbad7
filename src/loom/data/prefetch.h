// Prefetcher<Batch>: runs a producer on a background thread so the next batches are ready
// when the training step asks for them.
//
// Up to `depth` produced batches wait in a bounded queue; next() hands them out in production
// order. If the producer throws, the batches made before the failure are still handed out, then
// next() rethrows that exception (every call after as well) and production stops. The
// destructor stops production and joins; it waits for a producer call already in progress
// (a producer cannot be interrupted), never for queue space.
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
  // Seconds next() has spent waiting for the producer (the step was starved of data).
  double waited_seconds() const { return waited_s_; }

 private:
  void run() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        space_cv_.wait(lock, [this] { return stopping_ || ready_.size() < depth_; });
        if (stopping_) return;
      }
      try {
        Batch batch = producer_();  // outside the lock: next() can take ready batches meanwhile
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(batch));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        ready_cv_.notify_all();
        return;
      }
      ready_cv_.notify_one();
    }
  }

  std::function<Batch()> producer_;
  const size_t depth_;
  std::mutex mutex_;
  std::condition_variable ready_cv_;  // a batch or an error arrived
  std::condition_variable space_cv_;  // the queue has room, or the destructor wants a stop
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
  double waited_s_ = 0;  // next()'s thread only
  std::thread worker_;
};

}  // namespace loom
