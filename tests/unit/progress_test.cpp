// The progress line's ETA: the earlier of the step budget and the time budget (max_minutes).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "loom/core/json.h"
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

// A GEMM ceiling measured low (a loaded machine at start-up) gives no MFU above 100%.
TEST(Progress, MfuNeverExceedsOneWhenTheCeilingWasMeasuredLow) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("loom_progress_mfu_" + std::to_string(::getpid()) + ".jsonl");
  {
    Progress progress(path, 100, "img", 1, false);
    // 1e12 FLOP a step against a ceiling of 1 GFLOP/s: any step shorter than 1000 s beats it.
    progress.count_flops(1e12, /*ceiling_gflops=*/1.0, /*hardware_gflops=*/2.0, /*ranks=*/1);
    testing::internal::CaptureStdout();
    progress.log(0, 1.0, 1e-3);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    progress.log(1, 1.0, 1e-3);
    testing::internal::GetCapturedStdout();
  }
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  std::filesystem::remove(path);
  const loom::Json metrics = loom::Json::parse(last, path);
  ASSERT_TRUE(metrics.contains("mfu")) << last;
  EXPECT_LE(metrics.at("mfu").as_double(), 1.0) << last;
  EXPECT_GT(metrics.at("mfu").as_double(), 0.0) << last;
  EXPECT_LE(metrics.at("mfu_hardware").as_double(), 1.0) << last;
}

}  // namespace
