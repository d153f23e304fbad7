// The report's loss curve after a restart or a replay: a step logged twice is drawn by its last
// record, in step order (train/report.h).
#include <gtest/gtest.h>

#include "loom/train/report.h"

namespace loom::train {
namespace {

TEST(ReportRecords, AStepLoggedAgainIsDrawnByItsLastRecord) {
  // Steps 1-4 logged, the run restarted from step 2's checkpoint: 3 and 4 logged again.
  std::vector<Json> lines;
  for (auto [step, loss] : std::vector<std::pair<int64_t, double>>{
           {1, 5.0}, {2, 4.0}, {3, 3.5}, {4, 9.9}, {3, 3.4}, {4, 3.1}, {5, 3.0}})
    lines.push_back(Json::object({{"step", step}, {"loss", loss}}));
  const std::vector<Json> kept = last_record_per_step(lines);
  std::vector<std::pair<int64_t, double>> got;
  for (const Json& l : kept) got.emplace_back(l.at("step").as_int(), l.at("loss").as_double());
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, double>>{
                     {1, 5.0}, {2, 4.0}, {3, 3.4}, {4, 3.1}, {5, 3.0}}));
}

}  // namespace
}  // namespace loom::train
