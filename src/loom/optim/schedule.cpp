#include "loom/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom::optim {

LrSchedule::Kind schedule_kind_from_name(const std::string& name, const std::string& what) {
  if (name == "constant") return LrSchedule::Kind::Constant;
  if (name == "cosine") return LrSchedule::Kind::Cosine;
  LOOM_CHECK(name == "wsd") << what << " '" << name << "' (expected constant, cosine or wsd)";
  return LrSchedule::Kind::Wsd;
}

const char* name_of(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Kind::Constant:
      return "constant";
    case LrSchedule::Kind::Cosine:
      return "cosine";
    case LrSchedule::Kind::Wsd:
      return "wsd";
  }
  return "?";
}

void LrSchedule::validate() const {
  LOOM_CHECK(lr >= 0 && warmup_steps >= 0 && total_steps > 0 && min_lr_ratio >= 0 &&
             min_lr_ratio <= 1 && decay_fraction >= 0 && decay_fraction <= 1)
      << "schedule: bad values (lr " << lr << ", warmup " << warmup_steps << ", total "
      << total_steps << ", min_lr_ratio " << min_lr_ratio << ", decay_fraction " << decay_fraction
      << ")";
}

double LrSchedule::lr_at(int64_t step) const {
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  const double floor = lr * min_lr_ratio;
  if (kind == Kind::Constant) return lr;
  if (kind == Kind::Cosine) {
    const double span = double(std::max<int64_t>(total_steps - warmup_steps, 1));
    const double progress = std::min(1.0, double(step - warmup_steps) / span);
    return floor + (lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  // wsd: hold lr, then decay linearly to the floor over the last decay_fraction of steps.
  const int64_t decay_steps = int64_t(std::ceil(decay_fraction * double(total_steps)));
  const int64_t first =
      decay_start >= 0 ? decay_start : std::max(warmup_steps, total_steps - decay_steps);
  if (step < first) return lr;
  const double progress =
      std::min(1.0, double(step - first) / double(std::max<int64_t>(total_steps - first, 1)));
  return lr + (floor - lr) * progress;
}

}  // namespace loom::optim
