#include "loom/train/decay_timing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/core/error.h"

namespace loom::train {

DecayTiming::DecayTiming(const optim::LrSchedule& planned, double budget_s)
    : schedule_(planned), budget_s_(budget_s) {}

bool DecayTiming::pending(int64_t step) const {
  if (fixed_ || schedule_.kind != optim::LrSchedule::Kind::Wsd || budget_s_ <= 0) return false;
  if (step + 1 < schedule_.warmup_steps) return false;
  return schedule_.lr_at(step + 1) == schedule_.lr;  // the steps' own decay has not begun
}

bool DecayTiming::after_step(int64_t step, double elapsed_s, int64_t steps_timed,
                             int64_t multiple) {
  if (!pending(step) || steps_timed <= 0) return false;
  if (elapsed_s < (1.0 - schedule_.decay_fraction) * budget_s_) return false;
  const double step_s = elapsed_s / double(steps_timed);
  // The margin: 1% of the budget (the last checkpoint) and 5% of the time left (a slower
  // stretch on a shared machine: the budget's stop must not cut the decay short).
  const double left_s = (budget_s_ - elapsed_s) * 0.95 - 0.01 * budget_s_;
  const int64_t first = step + 1;
  int64_t end = first + std::max<int64_t>(1, int64_t(std::floor(left_s / step_s)));
  if (multiple > 1) end = std::max(first + multiple, end / multiple * multiple);
  end = std::min(end, schedule_.total_steps);
  if (end <= first) return false;  // no room left: the budget's stop ends the run
  schedule_.decay_start = first;
  schedule_.total_steps = end;
  fixed_ = true;
  return true;
}

Json DecayTiming::state() const {
  if (!fixed_) return Json::object();
  return Json::object(
      {{"decay_start", schedule_.decay_start}, {"decay_end", schedule_.total_steps}});
}

void DecayTiming::resume(const Json& trainer_state) {
  if (!trainer_state.contains("decay_start")) return;
  const int64_t first = trainer_state.at("decay_start").as_int();
  const int64_t end = trainer_state.at("decay_end").as_int();
  LOOM_CHECK(first >= 0 && end > first)
      << "the checkpoint's timed decay (steps " << first << ".." << end << ") is not valid";
  schedule_.decay_start = first;
  schedule_.total_steps = std::min(end, schedule_.total_steps);
  fixed_ = true;
}

std::string DecayTiming::describe() const {
  char text[200];
  std::snprintf(text, sizeof text,
                "decay of the learning rate timed to the budget: steps %lld..%lld, to %g of the "
                "peak; the run ends with it",
                (long long)schedule_.decay_start, (long long)schedule_.total_steps,
                schedule_.min_lr_ratio);
  return text;
}

}  // namespace loom::train
