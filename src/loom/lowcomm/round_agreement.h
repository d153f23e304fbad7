// When DiLoCo's ranks act together (lowcomm/diloco.h): the run's stops, preemptions and
// rollbacks agreed once an outer round, so that between outer steps nothing crosses the slow
// link.
#pragma once
#include <cstdint>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"

namespace loom::lowcomm {

// What every rank must act on together, at the same step.
struct Decision {
  bool out_of_time = false, preempted = false, roll_back = false;
};

// What each rank noted during a round is summed over the world at the round's end without
// waiting for it, and read at the end of the next round, long since arrived, so a slow link's
// round trip never holds a step. When that calls for action (or the run ends), the round's own
// notes are agreed then and there, so that every rank acts on the same facts at the same step:
// a decision comes one or two rounds after the fact.
class RoundAgreement {
 public:
  RoundAgreement(dist::ProcessGroup& world, int64_t inner_steps, int64_t steps)
      : world_(world), inner_steps_(inner_steps), steps_(steps) {}

  // After each step, this rank's notes; returns what to do now.
  Decision after_step(int64_t step, bool out_of_time, bool preempted, bool roll_back);
  // The run's end moved (a decay timed to the budget, train/decay_timing.h).
  void set_steps(int64_t steps) { steps_ = steps; }
  // Before the run stops between rounds' ends (train.stop_after): no exchange left in flight.
  void settle();

 private:
  dist::ProcessGroup& world_;
  const int64_t inner_steps_;
  int64_t steps_;
  bool noted_[3] = {false, false, false};  // out of time, preempted, roll back
  Tensor sent_;                            // (3,)
  dist::WorkPtr work_;
};

}  // namespace loom::lowcomm
