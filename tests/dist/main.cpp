// gtest main for the tests that run under mpirun: every rank runs every test, in the same
// order, so the collectives inside them match up. A rank that stops calling them is caught by
// the collective timeout instead of hanging the test.
#include <gtest/gtest.h>

#include "loom/dist/world.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  loom::dist::init_world({/*timeout_s=*/120});
  // Only rank 0 prints the per-test lines; every rank reports failures.
  if (loom::dist::world_rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  if (failed) std::fprintf(stderr, "rank %d: some tests failed\n", loom::dist::world_rank());
  loom::dist::shutdown_world();
  return failed;
}
