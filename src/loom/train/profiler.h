// The training profiler: `loom train --profile steps=A:B` records steps A..B (1-based, as the
// progress line counts them) of every rank as Chrome trace-event JSON: forward per module,
// backward per autograd node (tagged with its module), every kernel call, the optimizer, data
// waits, each collective with its bytes on the "collectives" tracks, and the memory per
// category as counters. Each rank writes <run_dir>/trace/rank<R>.json; rank 0 then merges them
// into <run_dir>/trace/trace.json (one process per rank), which opens in Perfetto.
#pragma once
#include <cstdint>
#include <string>

#include "loom/dist/process_group.h"

namespace loom::train {

struct ProfileWindow {
  int64_t first = 0, last = -1;  // 1-based, inclusive; last < first: off
  bool on() const { return last >= first; }
};
// "A:B" (or "" for off); throws naming the text if it is not two steps 1 <= A <= B.
ProfileWindow parse_profile_steps(const std::string& text);

class Profiler {
 public:
  // world: the ranks whose traces are merged (every rank of the job calls the same steps).
  Profiler(const ProfileWindow& window, const std::string& run_dir, dist::ProcessGroup& world);
  // Around each training step (`step` 0-based, as the trainers count). Recording starts at
  // the first step of the window this run executes (a run resumed inside the window records
  // the rest of it) and is written after step B.
  void begin_step(int64_t step);
  void end_step(int64_t step);
  // After the loop: writes what was recorded if the run stopped inside the window (a time
  // budget ran out); every rank calls it, as every rank stops at the same step.
  void finish();

 private:
  void write();
  ProfileWindow window_;
  bool recording_ = false;
  int64_t first_step_ = 0, last_step_ = 0;  // 1-based: the steps recorded
  std::string dir_;
  dist::ProcessGroup& world_;
};

}  // namespace loom::train
