// The part of CUDA the backend uses, on the host: with LOOM_CUDA_EMULATE the backend's .cu
// files compile as plain C++ and their kernels run on the CPU, one thread per block
// (blockDim 1, blocks in order), on "device" memory that is host memory. Every kernel is written
// for any block size (block-stride loops, the block reductions of device_code.h), so this
// runs the kernels' indexing and arithmetic through the op harness on machines without a GPU.
// It cannot find what only shows with many threads (races, the warp-level reductions), which
// the same harness checks on a real GPU.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local dim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
inline void __syncthreads() {}

using cudaStream_t = void*;
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
inline const char* cudaGetErrorString(cudaError_t) {
  return "emulated CUDA error";
}
inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : 2;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  if (n) std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
// Pinned host memory is host memory; events complete at once (every "kernel" already ran).
constexpr unsigned cudaHostAllocDefault = 0, cudaEventDisableTiming = 2;
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::malloc(n);
  return *p ? cudaSuccess : 2;
}
inline cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
using cudaEvent_t = int*;
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  static int event;
  *e = &event;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}

namespace loom::cuda_emulated {
// kernel<<<grid, block>>>(args): every block in order, each as one thread.
template <typename Fn>
void emulate_launch(dim3 grid, Fn&& fn) {
  gridDim = grid;
  blockDim = dim3(1, 1, 1);
  threadIdx = dim3(0, 0, 0);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        fn();
      }
}
}  // namespace loom::cuda_emulated

using std::isinf;
using std::isnan;
