// The profiler's recorder: Chrome trace events (complete events, counters) per thread, opened
// in Perfetto. Recording is off unless a profile window is active; then each thread appends to
// its own buffer. When off, a Scope costs one relaxed atomic load: no clock read, no string.
//
// Names and categories are `const char*` that must outlive the recording (literals, or strings
// owned by long-lived objects such as a Module's trace name).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace loom::trace {

extern std::atomic<bool> g_recording;
inline bool recording() {
  return g_recording.load(std::memory_order_relaxed);
}

int64_t now_ns();  // steady clock

// A complete event ("ph": "X") on `tid` (-1: the calling thread's track). args: a JSON object
// body without braces ("\"bytes\": 4096"), or empty.
void complete(const char* name, const char* cat, int64_t start_ns, int64_t end_ns,
              std::string args = {}, int tid = -1);
// A counter sample ("ph": "C") named `name` with one series per (key, value).
void counter(const char* name, const char* const* keys, const double* values, int n);
// A named track that is not a thread (e.g. a lane of in-flight collectives); its id for tid.
int virtual_track(const std::string& name);
// Names the calling thread's track ("main"; other threads' tracks are called "thread").
void name_this_thread(const std::string& name);

// Times the enclosing block as a complete event on the calling thread.
class Scope {
 public:
  Scope(const char* name, const char* cat) {
    if (recording()) {
      name_ = name;
      cat_ = cat;
      start_ = now_ns();
    }
  }
  ~Scope() {
    if (name_) complete(name_, cat_, start_, now_ns(), std::move(args_));
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  bool active() const { return name_ != nullptr; }
  void set_args(std::string args) { args_ = std::move(args); }  // only when active()

 private:
  const char* name_ = nullptr;
  const char* cat_ = nullptr;
  int64_t start_ = 0;
  std::string args_;
};

// Starts recording (clearing what an earlier window left); timestamps are written relative to
// `origin_ns` (ranks pass the time they left a common barrier, so their traces line up).
void start(int64_t origin_ns);
// Stops recording and returns the trace as Chrome trace-event JSON ({"traceEvents": [...]}),
// events sorted by time per track, every event with "pid" = pid; `process_name` labels it.
std::string stop(int pid, const std::string& process_name);

}  // namespace loom::trace
