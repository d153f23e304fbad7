#include "loom/dist/work.h"

#include <atomic>
#include <chrono>

#include "loom/core/error.h"
#include "loom/core/trace.h"

namespace loom::dist {

namespace {
std::atomic<int64_t> waited_ns{0}, in_flight_ns{0};
}  // namespace

CommTimes comm_times() {
  return {double(waited_ns.load()) * 1e-9, double(in_flight_ns.load()) * 1e-9};
}

void add_in_flight_seconds(double seconds) {
  in_flight_ns += int64_t(seconds * 1e9);
}

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_) {
    // Exposed communication: the caller is blocked on it.
    trace::Scope scope("wait", "comm_wait");
    if (scope.active()) scope.set_args("\"work\": \"" + description_ + "\"");
    const auto start = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return done_; });
    waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  }
  LOOM_CHECK(error_.empty()) << description_ << " failed: " << error_;
  if (on_wait_) {
    const std::function<void()> f = std::move(on_wait_);
    on_wait_ = nullptr;
    lock.unlock();
    f();
  }
}

bool Work::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::finish(std::string error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

WorkPtr finished_work(std::string description) {
  auto w = std::make_shared<Work>(std::move(description));
  w->finish();
  return w;
}

}  // namespace loom::dist
