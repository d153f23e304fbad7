// A warmup-stable-decay schedule timed to the run's budget (optim.schedule = "wsd" with
// train.max_minutes > 0). A run ended by time would otherwise stop on a learning rate that never
// came down, since its step count is only a ceiling. Once (1 - optim.decay_fraction) of the
// budget is used, the run fixes its decay: from the next step, for as many steps as the rest of
// the budget holds at the mean step time so far, less a margin of 1% of the budget (the last
// checkpoint) and 5% of the time left (a slower stretch); the run then ends with the decay. Fixed,
// the decay is steps, not seconds: it is recorded in every checkpoint and a resumed run keeps it. A
// run whose train.steps run out first decays by its steps, as an untimed one does.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/json.h"
#include "loom/optim/schedule.h"

namespace loom::train {

class DecayTiming {
 public:
  // planned: the schedule by train.steps (its total_steps); budget_s: train.max_minutes in
  // seconds (0: none, nothing to time).
  DecayTiming(const optim::LrSchedule& planned, double budget_s);

  // Whether the decay still waits for its time after step `step` (0-based): wsd, a budget, not
  // fixed, the warmup over and the steps' own decay not begun.
  bool pending(int64_t step) const;
  // After step `step`, with `elapsed_s` of the budget used by `steps_timed` steps (the same
  // figures on every rank): fixes the decay when its time has come, ending on a multiple of
  // `multiple` steps (DiLoCo's rounds). Returns whether it fixed it now.
  bool after_step(int64_t step, double elapsed_s, int64_t steps_timed, int64_t multiple = 1);

  const optim::LrSchedule& schedule() const { return schedule_; }
  int64_t end_step() const { return schedule_.total_steps; }  // the run's last step + 1
  bool fixed() const { return fixed_; }
  // {"decay_start": S, "decay_end": E} once fixed, else an empty object; resume() reads it from
  // a checkpoint's trainer state (absent: not fixed when it was written).
  Json state() const;
  void resume(const Json& trainer_state);
  std::string describe() const;  // "decay of the learning rate over steps S..E (...)"

 private:
  optim::LrSchedule schedule_;
  double budget_s_;
  bool fixed_ = false;
};

}  // namespace loom::train
