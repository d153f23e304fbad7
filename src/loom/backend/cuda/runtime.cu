// The process's CUDA device, stream and allocator, and the backend object.
#include <cstdlib>
#include <string>

#include "loom/backend/cuda/cuda_backend.h"

namespace loom::LOOM_CUDA_NS {

namespace {

// The device this process uses: with several per machine, MPI's local rank picks one, so the
// ranks of a machine take one GPU each.
int choose_device() {
#ifdef LOOM_CUDA_EMULATE
  return 0;
#else
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  LOOM_CHECK(status == cudaSuccess && count > 0)
      << "no CUDA device is usable (" << cudaGetErrorString(status)
      << "): run with device cpu, or on a machine with an NVIDIA GPU and its driver";
  int local = 0;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  const int device = local % count;
  LOOM_CUDA_CHECK(cudaSetDevice(device));
  return device;
#endif
}

class CachingDeviceAllocator final : public CachingAllocator {
 public:
  ~CachingDeviceAllocator() override = default;  // process exit frees device memory

 protected:
  void* system_allocate(size_t nbytes) override {
    stream();  // the device is chosen before the first allocation
    void* p = nullptr;
    return cudaMalloc(&p, nbytes) == cudaSuccess ? p : (cudaGetLastError(), nullptr);
  }
  void system_free(void* ptr) override {
    // A freed block may still be read by a kernel in flight on the stream.
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    LOOM_CUDA_CHECK(cudaFree(ptr));
  }
  void fill_bytes(void* ptr, int value, size_t nbytes) override {
    LOOM_CUDA_CHECK(cudaMemsetAsync(ptr, value, nbytes, stream()));
  }
  const char* memory_name() const override { return "CUDA device memory"; }
};

}  // namespace

cudaStream_t stream() {
  static cudaStream_t s = [] {
    choose_device();
    cudaStream_t created = nullptr;
#ifndef LOOM_CUDA_EMULATE
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
#endif
    return created;
  }();
  return s;
}

int CudaBackend::device_count() const {
#ifdef LOOM_CUDA_EMULATE
  return 1;  // the emulated machine has one device
#else
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : (cudaGetLastError(), 0);
#endif
}

CachingAllocator& device_allocator() {
  static CachingDeviceAllocator* a = new CachingDeviceAllocator();  // outlives static tensors
  return *a;
}

Tensor scratch_f64(int64_t n, Device device) {
  return Tensor::empty({n}, DType::I64, device);  // 8-byte elements
}

CudaBackend& backend() {
  static CudaBackend* b = new CudaBackend();
  return *b;
}

}  // namespace loom::LOOM_CUDA_NS

#ifndef LOOM_CUDA_EMULATE
namespace loom {
namespace {
// Registered before main: a CUDA tensor can be allocated before any kernel has run.
[[maybe_unused]] const bool allocator_registered =
    (register_allocator(DeviceType::CUDA, &cuda::device_allocator()), true);
}  // namespace
Backend& cuda_backend() {
  return cuda::backend();
}
}  // namespace loom
#endif
