// gtest main for the device tests that run under mpirun: on the CUDA backend's host emulation
// (the emulated backend and allocator take the place of DeviceType::CUDA's), or on a real GPU
// that the processes share (scripts/device_check.sh dist). Every rank runs every test in the
// same order (tests/dist/main.cpp).
#include <gtest/gtest.h>

#include <cstdio>

#ifdef LOOM_CUDA_EMULATE
#include "loom/backend/cuda/cuda_backend.h"
#else
#include <cuda_runtime.h>
#endif
#include "loom/dist/world.h"

// On ranks other than 0: only their failures, each naming the rank (a failure on one rank
// alone would otherwise go unseen).
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (result.failed())
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_,
                   result.file_name() ? result.file_name() : "?", result.line_number(),
                   result.message());
  }

 private:
  int rank_;
};

int main(int argc, char** argv) {
#ifdef LOOM_CUDA_EMULATE
  loom::register_allocator(loom::DeviceType::CUDA, &loom::cuda_emulated::device_allocator());
  loom::register_backend(loom::DeviceType::CUDA, &loom::cuda_emulated::backend());
#else
  int count = 0;  // without a GPU: not run, exit 77 (skipped, never passed)
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cuda dist tests: no CUDA device here; not run\n");
    return 77;
  }
#endif
  testing::InitGoogleTest(&argc, argv);
  loom::dist::init_world({/*timeout_s=*/120});
  if (loom::dist::world_rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(loom::dist::world_rank()));
  }
  const int failed = RUN_ALL_TESTS();
  if (failed) std::fprintf(stderr, "rank %d: some tests failed\n", loom::dist::world_rank());
  loom::dist::shutdown_world();
  return failed;
}
