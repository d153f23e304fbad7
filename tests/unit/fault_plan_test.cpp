// LOOM_FAULT parsing: what each fault does is exercised by tests/e2e/fault_suite_test.sh; here,
// which faults a spec selects for a restart attempt, and a clear error for every malformed one.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/train/fault.h"

namespace {

using loom::train::FaultPlan;

void expect_error(const std::string& spec, const std::string& part) {
  try {
    FaultPlan::parse(spec, 0);
    ADD_FAILURE() << "'" << spec << "' was accepted";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(FaultPlan, SelectsTheFaultsOfTheAttempt) {
  const std::string spec =
      "nan:rank=1,step=6; slow:rank=2,step=3,factor=2.5;nan:rank=0,step=9,attempt=1";
  const FaultPlan first = FaultPlan::parse(spec, 0), second = FaultPlan::parse(spec, 1);
  EXPECT_TRUE(first.poisons_loss(6, 1));
  EXPECT_FALSE(first.poisons_loss(6, 0));
  EXPECT_FALSE(first.poisons_loss(9, 0));
  EXPECT_TRUE(second.poisons_loss(9, 0));
  EXPECT_FALSE(second.poisons_loss(6, 1));
  EXPECT_EQ(first.slowdown(2, 2), 1.0);
  EXPECT_EQ(first.slowdown(3, 2), 2.5);
  EXPECT_EQ(first.slowdown(30, 2), 2.5);
  EXPECT_EQ(first.slowdown(30, 1), 1.0);
  EXPECT_TRUE(FaultPlan::parse("", 0).empty());
  EXPECT_FALSE(FaultPlan::parse("startup:rank=3,ms=200", 0).empty());
  EXPECT_TRUE(FaultPlan::parse("startup:rank=3,ms=200,attempt=1", 0).empty());
}

TEST(FaultPlan, MalformedSpecsAreNamed) {
  expect_error("explode:rank=1,step=2", "unknown fault 'explode'");
  expect_error("kill:rank=1", "'kill:rank=1' needs step=S");
  expect_error("kill:rank=1,step=0", "needs step=S (S >= 1)");
  expect_error("kill:rank=x,step=2", "'x' in 'kill:rank=x,step=2' is not a non-negative integer");
  expect_error("kill:rank=1,step=2,when=now", "unknown key 'when'");
  expect_error("kill:rank=1,step", "'step' in 'kill:rank=1,step' is not key=value");
  expect_error("sleep:rank=1,step=2", "needs ms=M");
  expect_error("slow:rank=1,step=2,factor=0.5", "factor '0.5'");
  expect_error("corrupt:step=2", "needs file=F");
  expect_error("startup:rank=1", "'startup:rank=1' needs ms=M");
  expect_error("startup:rank=1,ms=5,step=2", "'startup:rank=1,ms=5,step=2' takes no step");
}

}  // namespace
