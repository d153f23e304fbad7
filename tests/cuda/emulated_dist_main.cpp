// gtest main for the device tests that run under mpirun on the CUDA backend's host emulation:
// the emulated backend and allocator take the place of DeviceType::CUDA's, and every rank runs
// every test in the same order (tests/dist/main.cpp).
#include <gtest/gtest.h>

#include "loom/backend/cuda/cuda_backend.h"
#include "loom/dist/world.h"

int main(int argc, char** argv) {
  loom::register_allocator(loom::DeviceType::CUDA, &loom::cuda_emulated::device_allocator());
  loom::register_backend(loom::DeviceType::CUDA, &loom::cuda_emulated::backend());
  testing::InitGoogleTest(&argc, argv);
  loom::dist::init_world({/*timeout_s=*/120});
  if (loom::dist::world_rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  if (failed) std::fprintf(stderr, "rank %d: some tests failed\n", loom::dist::world_rank());
  loom::dist::shutdown_world();
  return failed;
}
