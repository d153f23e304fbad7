#include "loom/dist/work.h"

#include "loom/core/error.h"

namespace loom::dist {

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  LOOM_CHECK(error_.empty()) << description_ << " failed: " << error_;
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
