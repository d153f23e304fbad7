// Work: the handle of an asynchronous collective or point-to-point operation.
//
// A ProcessGroup returns one for every call; the operation runs on the backend's
// communication thread while the caller goes on computing, and wait() blocks until it is done.
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace loom::dist {

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation has finished; throws loom::Error if it failed.
  void wait();
  bool completed() const;
  // "all_reduce #12 on group dp_shard": what the operation is, for messages.
  const std::string& description() const { return description_; }

  // Backend side: marks the operation finished (an empty error means success).
  void finish(std::string error = "");
  // Backend side: `f` runs once, in the caller's thread that waits for the finished operation,
  // before that wait returns (a staged group copies its results back to the device there:
  // dist/staged_group.h). Set before the handle is returned.
  void on_wait(std::function<void()> f) { on_wait_ = std::move(f); }

 private:
  std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
  std::function<void()> on_wait_;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that is already finished (single-member groups, empty tensors).
WorkPtr finished_work(std::string description);

// Where this process's communication time went, since it started: seconds callers spent
// blocked in Work::wait() (communication not hidden behind compute), and seconds during which
// at least one operation was in flight on the communication thread.
struct CommTimes {
  double waited_s = 0;
  double in_flight_s = 0;
};
CommTimes comm_times();
void add_in_flight_seconds(double seconds);  // backend side

}  // namespace loom::dist
