#include "loom/core/ordered_worker.h"

#include <algorithm>

namespace loom {

OrderedWorker::~OrderedWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  posted_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OrderedWorker::post(size_t key, std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    jobs_.push_back(std::move(job));
    if (last_of_key_.size() <= key) last_of_key_.resize(key + 1, 0);
    last_of_key_[key] = ++posted_;
  }
  posted_cv_.notify_one();
}

void OrderedWorker::wait_for(uint64_t target, std::unique_lock<std::mutex>& lock) {
  done_cv_.wait(lock, [&] { return done_ >= target || error_; });
  if (error_) std::rethrow_exception(error_);
}

void OrderedWorker::wait_keys(size_t begin, size_t end) {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t target = 0;
  for (size_t k = begin; k < std::min(end, last_of_key_.size()); ++k)
    target = std::max(target, last_of_key_[k]);
  wait_for(target, lock);
}

void OrderedWorker::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(posted_, lock);
}

int64_t OrderedWorker::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(posted_ - done_);
}

void OrderedWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    posted_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::exception_ptr failed;
    try {
      job();
    } catch (...) {
      failed = std::current_exception();
    }
    job = nullptr;  // what it holds goes here, not under the lock
    lock.lock();
    ++done_;
    if (failed && !error_) {
      error_ = failed;
      done_ += jobs_.size();  // the rest are dropped: each waiter sees the error instead
      jobs_.clear();
    }
    done_cv_.notify_all();
  }
}

}  // namespace loom
