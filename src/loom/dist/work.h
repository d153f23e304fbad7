// Work: the handle of an asynchronous collective or point-to-point operation.
//
// A ProcessGroup returns one for every call; the operation runs on the backend's
// communication thread while the caller goes on computing, and wait() blocks until it is done.
#pragma once
#include <condition_variable>
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

 private:
  std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
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
