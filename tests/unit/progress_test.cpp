// The progress line's ETA: the earlier of the step budget and the time budget (max_minutes).
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "loom/train/progress.h"

namespace {

using loom::train::eta_seconds;
using loom::train::Progress;

TEST(Progress, EtaIsTheEarlierOfStepsAndTimeBudget) {
  EXPECT_DOUBLE_EQ(eta_seconds(0.5, 100, 0, 10), 50.0);      // no budget: steps x step time
  EXPECT_DOUBLE_EQ(eta_seconds(0.5, 100, 900, 10), 50.0);    // steps end first
  EXPECT_DOUBLE_EQ(eta_seconds(2.0, 3000, 900, 60), 840.0);  // the budget ends first
  EXPECT_DOUBLE_EQ(eta_seconds(2.0, 3000, 900, 1000), 0.0);  // budget spent: no negative ETA
}

// The main job's case: 50 minutes of steps, a 15-minute budget. The line shows the budget.
std::string second_line(double budget_s) {
  Progress progress("", /*total_steps=*/1'000'000, "img", 1, false);
  progress.set_time_budget(budget_s);
  testing::internal::CaptureStdout();
  progress.log(0, 1.0, 1e-3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  progress.log(1, 1.0, 1e-3);  // >= 20 ms a step: a million steps take hours
  const std::string out = testing::internal::GetCapturedStdout();
  return out.substr(out.find('\n') + 1);
}

TEST(Progress, LineShowsTheTimeBudgetsEta) {
  const std::string budgeted = second_line(15 * 60);
  EXPECT_NE(budgeted.find("ETA 15m00s (max_minutes)"), std::string::npos) << budgeted;
  const std::string unbounded = second_line(0);
  EXPECT_EQ(unbounded.find("max_minutes"), std::string::npos) << unbounded;
  EXPECT_TRUE(std::regex_search(unbounded, std::regex("ETA [0-9]+h[0-9]{2}m \\|")))
      << unbounded;  // hours of steps
}

}  // namespace
