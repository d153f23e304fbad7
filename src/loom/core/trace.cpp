#include "loom/core/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

namespace loom::trace {

std::atomic<bool> g_recording{false};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

struct Event {
  const char* name;
  const char* cat;
  char ph;  // 'X' complete, 'C' counter
  int64_t ts_ns, dur_ns;
  std::string args;
};

// One thread's (or virtual track's) buffer. Buffers live for the process: a thread that ends
// keeps its events until they are written.
struct Track {
  int tid = 0;
  std::string name;
  std::mutex mutex;  // the owner appends; stop() reads; virtual tracks have many writers
  std::vector<Event> events;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Track>> tracks;
  int64_t origin_ns = 0;
  Track* add(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    tracks.push_back(std::make_unique<Track>());
    Track* t = tracks.back().get();
    t->tid = int(tracks.size());
    t->name = name;
    return t;
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // leaked: threads may record during static destruction
  return *r;
}

Track& this_thread_track() {
  thread_local Track* track = registry().add("thread");
  return *track;
}

Track* track_by_tid(int tid) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return tid >= 1 && tid <= int(r.tracks.size()) ? r.tracks[size_t(tid - 1)].get() : nullptr;
}

void append(Track& track, Event e) {
  std::lock_guard<std::mutex> lock(track.mutex);
  track.events.push_back(std::move(e));
}

void append_escaped(std::string& out, const char* s) {
  for (; *s; ++s) {
    const char c = *s;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
}

}  // namespace

void complete(const char* name, const char* cat, int64_t start_ns, int64_t end_ns, std::string args,
              int tid) {
  if (!recording()) return;
  Track* track = tid < 0 ? &this_thread_track() : track_by_tid(tid);
  if (!track) return;
  append(*track,
         Event{name, cat, 'X', start_ns, std::max<int64_t>(0, end_ns - start_ns), std::move(args)});
}

void counter(const char* name, const char* const* keys, const double* values, int n) {
  if (!recording()) return;
  std::string args;
  char buf[64];
  for (int i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.17g", i ? ", " : "", keys[i], values[i]);
    args += buf;
  }
  // One track for every thread's samples (kernels' worker threads allocate scratch too).
  static const int tid = virtual_track("memory");
  Track* track = track_by_tid(tid);
  append(*track, Event{name, "memory", 'C', now_ns(), 0, std::move(args)});
}

int virtual_track(const std::string& name) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& t : r.tracks) {
      std::lock_guard<std::mutex> tl(t->mutex);
      if (t->name == name) return t->tid;
    }
  }
  return r.add(name)->tid;
}

void name_this_thread(const std::string& name) {
  Track& track = this_thread_track();
  std::lock_guard<std::mutex> lock(track.mutex);
  track.name = name;
}

void start(int64_t origin_ns) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto& t : r.tracks) {
      std::lock_guard<std::mutex> tl(t->mutex);
      t->events.clear();
    }
    r.origin_ns = origin_ns;
  }
  g_recording.store(true, std::memory_order_relaxed);
}

std::string stop(int pid, const std::string& process_name) {
  g_recording.store(false, std::memory_order_relaxed);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, \"args\": "
                "{\"name\": \"",
                pid);
  out += buf;
  append_escaped(out, process_name.c_str());
  out += "\"}}";
  for (auto& t : r.tracks) {
    std::lock_guard<std::mutex> tl(t->mutex);
    if (t->events.empty()) continue;
    std::snprintf(buf, sizeof buf,
                  ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"name\": \"",
                  pid, t->tid);
    out += buf;
    append_escaped(out, t->name.c_str());
    out += "\"}}";
    // By start time; an enclosing event (longer) before the ones it contains.
    std::stable_sort(t->events.begin(), t->events.end(), [](const Event& a, const Event& b) {
      return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.dur_ns > b.dur_ns;
    });
    for (const Event& e : t->events) {
      out += ",\n{\"ph\": \"";
      out += e.ph;
      out += "\", \"name\": \"";
      append_escaped(out, e.name);
      out += "\", \"cat\": \"";
      append_escaped(out, e.cat);
      std::snprintf(buf, sizeof buf, "\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f", pid, t->tid,
                    double(e.ts_ns - r.origin_ns) / 1e3);
      out += buf;
      if (e.ph == 'X') {
        std::snprintf(buf, sizeof buf, ", \"dur\": %.3f", double(e.dur_ns) / 1e3);
        out += buf;
      }
      out += ", \"args\": {";
      out += e.args;
      out += "}}";
    }
    t->events.clear();
  }
  out += "\n]}\n";
  return out;
}

}  // namespace loom::trace
