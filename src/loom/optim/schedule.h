// Learning-rate schedules: linear warmup, then constant, cosine, or warmup-stable-decay.
#pragma once
#include <cstdint>
#include <string>

namespace loom::optim {

struct LrSchedule {
  enum class Kind { Constant, Cosine, Wsd };  // "constant", "cosine", "wsd" in a config
  Kind kind = Kind::Cosine;
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.1;    // floor of cosine / end of the wsd decay, as a fraction of lr
  double decay_fraction = 0.2;  // wsd: the final fraction of steps that decays linearly
  // wsd: the decay's first step, where set (>= 0) rather than from decay_fraction; a run timed
  // by train.max_minutes fixes it, with total_steps, once it knows its step rate
  // (train/decay_timing.h).
  int64_t decay_start = -1;
  void validate() const;
  double lr_at(int64_t step) const;  // step counted from 0
};

// From a config's spelling; another name throws "<what> '<name>' (expected constant, cosine or
// wsd)".
LrSchedule::Kind schedule_kind_from_name(const std::string& name,
                                         const std::string& what = "schedule");
const char* name_of(LrSchedule::Kind kind);

}  // namespace loom::optim
