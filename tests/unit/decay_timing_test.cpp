// The warmup-stable-decay schedule timed to a run's budget (train/decay_timing.h), against
// learning rates written out here from the schedule's definition: hold the peak, then fall
// linearly to min_lr_ratio of it from the decay's first step to its last.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "loom/train/decay_timing.h"

namespace {

using loom::optim::LrSchedule;
using loom::train::DecayTiming;

LrSchedule wsd(int64_t total) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Wsd;
  s.lr = 1.0;
  s.warmup_steps = 10;
  s.total_steps = total;
  s.min_lr_ratio = 0.1;
  s.decay_fraction = 0.2;
  return s;
}

TEST(DecayTiming, FixesTheDecayToFillTheRestOfTheBudget) {
  DecayTiming d(wsd(100000), /*budget_s=*/100);
  EXPECT_FALSE(d.pending(5));  // still warming up
  EXPECT_TRUE(d.pending(50));
  // 50 s of 100 used: the decay's time (80 s) has not come.
  EXPECT_FALSE(d.after_step(99, 50.0, 100));
  EXPECT_FALSE(d.fixed());
  // 80 s for 200 steps: 0.4 s a step; 20 s left, less 5% of them and 1% of the budget (the
  // margin) = 18 s, hold 45 steps.
  EXPECT_TRUE(d.after_step(199, 80.0, 200));
  EXPECT_TRUE(d.fixed());
  EXPECT_FALSE(d.pending(200));
  EXPECT_EQ(d.end_step(), 245);
  const LrSchedule& s = d.schedule();
  EXPECT_DOUBLE_EQ(s.lr_at(199), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(200), 1.0);
  for (int64_t step : {210, 230, 244})
    EXPECT_NEAR(s.lr_at(step), 1.0 + (0.1 - 1.0) * double(step - 200) / 45.0, 1e-12) << step;
  EXPECT_NEAR(s.lr_at(245), 0.1, 1e-12);  // past the end: the floor
}

TEST(DecayTiming, StepsThatRunOutFirstDecayByTheirOwnSchedule) {
  const LrSchedule planned = wsd(300);  // decays over steps 240..300 by itself
  DecayTiming d(planned, 1000);
  EXPECT_TRUE(d.pending(239));   // step 240, the decay's first, still runs at the peak
  EXPECT_FALSE(d.pending(240));  // step 241's rate is below the peak: the steps' decay began
  EXPECT_FALSE(d.after_step(250, 900.0, 251));
  for (int64_t step = 0; step < 300; ++step)
    EXPECT_DOUBLE_EQ(d.schedule().lr_at(step), planned.lr_at(step));
  // A decay timed past the last step ends with the steps.
  DecayTiming late(planned, 100);
  EXPECT_TRUE(late.after_step(99, 80.0, 100));  // 0.8 s a step: 18 s hold 22 steps, to 122
  EXPECT_EQ(late.end_step(), 122);
  DecayTiming capped(wsd(150), 1000);
  EXPECT_TRUE(capped.after_step(99, 800.0, 1000));  // 0.8 s a step: 237 steps, capped at 150
  EXPECT_EQ(capped.end_step(), 150);
}

TEST(DecayTiming, EndsOnAWholeRoundAndWithoutABudgetNeverTimes) {
  DecayTiming d(wsd(100000), 100);
  EXPECT_TRUE(d.after_step(199, 80.0, 200, /*multiple=*/8));  // 245 rounded down to 240
  EXPECT_EQ(d.end_step(), 240);
  DecayTiming none(wsd(100000), 0);
  EXPECT_FALSE(none.pending(500));
  EXPECT_FALSE(none.after_step(500, 1e9, 501));
  LrSchedule constant = wsd(100000);
  constant.kind = LrSchedule::Kind::Constant;
  EXPECT_FALSE(DecayTiming(constant, 100).after_step(199, 99.0, 200));
}

TEST(DecayTiming, AResumedRunKeepsTheDecayItFixed) {
  DecayTiming d(wsd(100000), 100);
  ASSERT_TRUE(d.after_step(199, 80.0, 200));
  DecayTiming again(wsd(100000), /*a new budget*/ 50);
  again.resume(loom::Json::object({{"step", 220}, {"decay_start", 200}, {"decay_end", 245}}));
  EXPECT_TRUE(again.fixed());
  EXPECT_FALSE(again.pending(230));
  EXPECT_EQ(again.end_step(), 245);
  for (int64_t step = 0; step < 260; ++step)
    EXPECT_EQ(again.schedule().lr_at(step), d.schedule().lr_at(step)) << step;
  DecayTiming untimed(wsd(100000), 100);
  untimed.resume(loom::Json::object({{"step", 20}}));  // written before the decay was timed
  EXPECT_FALSE(untimed.fixed());
  expect_error(
      [] {
        DecayTiming(wsd(100), 100)
            .resume(loom::Json::object({{"decay_start", 50}, {"decay_end", 40}}));
      },
      {"timed decay", "50..40"});
}

}  // namespace
