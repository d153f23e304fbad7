#include "loom/train/profiler.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/trace.h"

namespace loom::train {

ProfileWindow parse_profile_steps(const std::string& text) {
  if (text.empty()) return {};
  ProfileWindow w;
  long long a = 0, b = 0;
  char tail = 0;
  const int got = std::sscanf(text.c_str(), "%lld:%lld%c", &a, &b, &tail);
  LOOM_CHECK(got == 2 && a >= 1 && b >= a)
      << "profile steps '" << text << "': expected A:B with 1 <= A <= B (steps as the progress "
      << "line counts them, e.g. 5:7)";
  w.first = a;
  w.last = b;
  return w;
}

Profiler::Profiler(const ProfileWindow& window, const std::string& run_dir,
                   dist::ProcessGroup& world)
    : window_(window), dir_(run_dir + "/trace"), world_(world) {}

void Profiler::begin_step(int64_t step) {
  if (!window_.on() || recording_ || step + 1 < window_.first || step + 1 > window_.last) return;
  recording_ = true;
  first_step_ = last_step_ = step + 1;
  std::filesystem::create_directories(dir_);
  world_.barrier()->wait();  // every rank leaves at nearly the same moment: a common origin
  trace::name_this_thread("main");
  trace::start(trace::now_ns());
}

void Profiler::end_step(int64_t step) {
  if (!recording_) return;
  last_step_ = step + 1;
  if (last_step_ == window_.last) write();
}

void Profiler::finish() {
  if (recording_) write();
}

void Profiler::write() {
  recording_ = false;
  const int rank = world_.rank();
  const std::string json = trace::stop(rank, "rank " + std::to_string(rank));
  const std::string path = dir_ + "/rank" + std::to_string(rank) + ".json";
  write_file_atomic(path, json);
  world_.barrier()->wait();
  if (rank != 0) return;
  // Merged: every rank's events in one list (each rank is its own pid).
  std::string merged = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (int r = 0; r < world_.size(); ++r) {
    std::ifstream in(dir_ + "/rank" + std::to_string(r) + ".json");
    if (!in) {  // a warning, not an error: the other ranks have gone on training
      std::printf(
          "profile: cannot read %s/rank%d.json (the run directory is not shared by the "
          "ranks?): the merged trace leaves it out\n",
          dir_.c_str(), r);
      continue;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string s = ss.str();
    const size_t open = s.find('['), close = s.rfind(']');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::string body = s.substr(open + 1, close - open - 1);
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.pop_back();
    while (!body.empty() && body.front() == '\n') body.erase(body.begin());
    if (body.empty()) continue;
    merged += (first ? "" : ",\n") + body;
    first = false;
  }
  merged += "\n]}\n";
  write_file_atomic(dir_ + "/trace.json", merged);
  std::printf("profile: steps %lld-%lld written to %s/trace.json (and rank<R>.json)\n",
              (long long)first_step_, (long long)last_step_, dir_.c_str());
  std::fflush(stdout);
}

}  // namespace loom::train
