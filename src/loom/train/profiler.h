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
  // Around each training step (`step` 0-based, as the trainers count).
  void begin_step(int64_t step);
  void end_step(int64_t step);

 private:
  ProfileWindow window_;
  std::string dir_;
  dist::ProcessGroup& world_;
};

}  // namespace loom::train
