// The CUDA tests against the CUDA backend's kernels compiled for the host (emulate.h): the
// emulated backend and allocator take the place of DeviceType::CUDA's.
#include <gtest/gtest.h>

#include "loom/backend/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  loom::register_allocator(loom::DeviceType::CUDA, &loom::cuda_emulated::device_allocator());
  loom::register_backend(loom::DeviceType::CUDA, &loom::cuda_emulated::backend());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
