// What every file of the CUDA backend includes: the CUDA runtime (or its host emulation,
// emulate.h), launching and error checks, element loads and stores, block reductions and
// strided indexing. Kernels are written for any block size: loops stride by blockDim and
// gridDim, and reductions go through block_sum / block_max.
#pragma once
#ifdef LOOM_CUDA_EMULATE
#include "loom/backend/cuda/emulate.h"
// The emulated backend lives in a namespace of its own, so that a test can link it beside the
// real one.
#define LOOM_CUDA_NS cuda_emulated
#else
#include <cuda_runtime.h>
#define LOOM_CUDA_NS cuda
#endif

#include <array>
#include <cstdint>

#include "loom/backend/dtype_dispatch.h"
#include "loom/backend/strided_layout.h"
#include "loom/core/dtype.h"
#include "loom/core/error.h"

namespace loom::LOOM_CUDA_NS {

// Throws loom::Error naming the call and CUDA's message.
#define LOOM_CUDA_CHECK(expr)                                             \
  do {                                                                    \
    const cudaError_t loom_cuda_status_ = (expr);                         \
    LOOM_CHECK(loom_cuda_status_ == cudaSuccess)                          \
        << #expr << " failed: " << cudaGetErrorString(loom_cuda_status_); \
  } while (0)

cudaStream_t stream();  // the stream every kernel and copy of this process runs on

// kernel<<<grid, block, 0, stream()>>>(args...), and a check that it launched.
#ifdef LOOM_CUDA_EMULATE
#define LOOM_LAUNCH(kernel, grid, block, ...) \
  ::loom::cuda_emulated::emulate_launch((grid), [&]() { kernel(__VA_ARGS__); })
#else
#define LOOM_LAUNCH(kernel, grid, block, ...)                            \
  do {                                                                   \
    kernel<<<(grid), (block), 0, ::loom::cuda::stream()>>>(__VA_ARGS__); \
    LOOM_CUDA_CHECK(cudaGetLastError());                                 \
  } while (0)
#endif

constexpr int kBlock = 256;  // threads per block of most kernels
// Threads of a kernel that is one block: the most a block takes, so that a reduction that
// must end in one place (a scale, a total) still reads with every lane of a multiprocessor.
constexpr int kReduceBlock = 1024;

// for (i = this thread's first item; i < n; i += all threads): any grid, any block size.
#define LOOM_GRID_STRIDE(i, n)                                              \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(blockDim.x) * gridDim.x)
// The same over the threads of one block.
#define LOOM_BLOCK_STRIDE(i, n) for (int64_t i = threadIdx.x; i < (n); i += blockDim.x)

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned blocks_for(int64_t n, int threads = kBlock) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

// Loads widen to f32 and stores round back (RNE), exactly as on the CPU (core/dtype.h).
template <typename T>
LOOM_HD inline float load(const T* p, int64_t i) {
  return to_f32(p[i]);
}
template <typename T>
LOOM_HD inline void store(T* p, int64_t i, float v) {
  p[i] = from_f32<T>(v);
}

// Sum and max over the block; every thread gets the result. Calls must be reached by every
// thread of the block (no early return before them).
#ifdef LOOM_CUDA_EMULATE
inline float block_sum(float v) {
  return v;
}
inline double block_sum(double v) {
  return v;
}
inline float block_max(float v) {
  return v;
}
#else
template <typename T, typename Op>
__device__ inline T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
struct AddOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
__device__ inline float block_sum(float v) {
  return block_reduce(v, AddOp{}, 0.0f);
}
__device__ inline double block_sum(double v) {
  return block_reduce(v, AddOp{}, 0.0);
}
__device__ inline float block_max(float v) {
  return block_reduce(v, MaxOp{}, -INFINITY);
}
#endif

// Up to 8 dims of N operands' strides over one shape, passed to kernels by value.
constexpr int kMaxDims = 8;
template <int N>
struct StridedIndex {
  int dims = 0;
  bool narrow = false;  // every index fits in 32 bits
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
  // Every operand's element offset of the element with row-major linear index i. The
  // coordinates are found once for all operands, in 32-bit arithmetic where the indices fit
  // (a 64-bit division costs the GPU several times a 32-bit one), and not at all in one dim.
  LOOM_HD void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = dims == 1 ? i * strides[k][0] : 0;
    if (dims == 1) return;
    if (narrow) {
      uint32_t j = uint32_t(i);
      for (int d = dims - 1; d >= 0; --d) {
        const uint32_t extent = uint32_t(shape[d]), c = j % extent;
        j /= extent;
        for (int k = 0; k < N; ++k) off[k] += int64_t(c) * strides[k][d];
      }
      return;
    }
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t c = i % shape[d];
      i /= shape[d];
      for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
    }
  }
};

// The coalesced layout of N operands over `shape` (throws beyond kMaxDims dims).
template <int N>
StridedIndex<N> strided_index(const Shape& shape, const std::array<const Shape*, N>& strides) {
  const StridedLayout<N> L = coalesce<N>(shape, strides);
  LOOM_CHECK(L.shape.size() <= size_t(kMaxDims))
      << "CUDA elementwise kernels take at most " << kMaxDims << " dims after merging, got "
      << L.shape.size();
  StridedIndex<N> s;
  s.dims = int(L.shape.size());
  int64_t numel = 1;
  for (const int64_t extent : shape) numel *= extent;
  s.narrow = numel <= int64_t(UINT32_MAX);
  for (int d = 0; d < s.dims; ++d) {
    s.shape[d] = L.shape[size_t(d)];
    for (int k = 0; k < N; ++k) s.strides[k][d] = L.strides[size_t(k)][size_t(d)];
  }
  return s;
}

// A device scratch tensor of n doubles (f64 partial sums), freed with the returned tensor.
Tensor scratch_f64(int64_t n, Device device);
inline double* f64_ptr(const Tensor& t) {
  return static_cast<double*>(t.raw_ptr());
}

// The device pointer of a tensor's first element, typed. A host tensor here is a bug in the
// caller (an op that made a tensor on the wrong device): named, not dereferenced.
template <typename T>
T* ptr(const Tensor& t) {
  LOOM_CHECK(t.device().type == DeviceType::CUDA)
      << "CUDA kernel given a tensor on " << t.device().str() << " " << t.shape();
  return static_cast<T*>(t.raw_ptr());
}

}  // namespace loom::LOOM_CUDA_NS
