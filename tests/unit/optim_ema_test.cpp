// The EMA of weights against a float64 recurrence written out here.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "loom/ops/ops.h"
#include "loom/optim/ema.h"

namespace {

TEST(Ema, WarmUpDecayThenCapFollowsTheFloat64Recurrence) {
  loom::Tensor w = loom::from_vector(std::vector<float>{1.0f, -2.0f, 0.5f}, {3});
  loom::optim::Ema ema({{"w", w, true}}, 0.95);
  std::vector<double> ref{1.0, -2.0, 0.5};
  for (int64_t n = 0; n < 40; ++n) {
    // New weights every step; the EMA sees them through the tracked tensor.
    const std::vector<float> now{float(n) * 0.1f, 1.0f - float(n), 0.5f + 0.01f * float(n * n)};
    loom::copy_(w, loom::from_vector(now, {3}));
    const double d = std::min(0.95, (1.0 + double(n)) / (10.0 + double(n)));
    EXPECT_DOUBLE_EQ(ema.decay_at(n), d);
    for (size_t i = 0; i < 3; ++i) ref[i] = d * ref[i] + (1.0 - d) * double(now[i]);
    ema.update(n);
    const std::vector<float> got = loom::to_vector(ema.named_weights()[0].second);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * std::max(1.0, std::abs(ref[i])))
          << "n=" << n << " i=" << i;
  }
  // The cap is reached ((1 + n) / (10 + n) >= 0.95 from n = 161) and held.
  EXPECT_DOUBLE_EQ(ema.decay_at(100000), 0.95);
  EXPECT_LT(ema.decay_at(100), 0.95);
  EXPECT_THROW(ema.decay_at(-1), loom::Error);
}

}  // namespace
