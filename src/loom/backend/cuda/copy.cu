// copy (any dtypes, any strides, host <-> device), fill and the layout-invariant random fill.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "loom/backend/cuda/cuda_backend.h"
#include "loom/core/rng.h"

namespace loom::LOOM_CUDA_NS {

namespace {

template <typename S, typename D>
__global__ void copy_kernel(const S* src, D* dst, StridedIndex<2> L, int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t at[2];
    L.offsets(i, at);
    const S v = src[at[0]];
    if constexpr (std::is_same_v<S, D>) {
      dst[at[1]] = v;
    } else {
      dst[at[1]] = Elem<D>::put(Elem<S>::get(v));
    }
  }
}

void device_copy(const Tensor& src, const Tensor& dst) {
  const StridedIndex<2> L = strided_index<2>(dst.shape(), {&src.strides(), &dst.strides()});
  const int64_t n = dst.numel();
  dispatch_any(src.dtype(), [&](auto s) {
    dispatch_any(dst.dtype(), [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      auto* kernel = copy_kernel<S, D>;
      LOOM_LAUNCH(kernel, blocks_for(n), kBlock, ptr<const S>(src), ptr<D>(dst), L, n);
    });
  });
}

bool dense(const Tensor& t) {
  return t.is_contiguous();
}

// Host <-> device transfers go through two pinned (page-locked) host buffers that take turns.
// The copy engine reads and writes pinned memory directly at the link's full speed (pageable
// memory the driver stages itself, synchronously), so a host-to-device transfer returns as soon
// as its bytes are in a pinned buffer and the host goes on queueing kernels while the copy
// runs: a batch moved to the GPU costs the training loop no wait. In a large transfer the
// host's memcpy of one chunk overlaps the copy engine's transfer of the other (checkpoints).
class PinnedStaging {
 public:
  static constexpr size_t kChunk = size_t(8) << 20;

  // Returns with `src` already read: the caller may free or change it.
  void to_device(void* dst, const void* src, size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t off = 0; off < n; off += kChunk) {
      const size_t len = std::min(kChunk, n - off);
      Buffer& b = take();
      std::memcpy(b.host, static_cast<const char*>(src) + off, len);
      LOOM_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, b.host, len,
                                      cudaMemcpyHostToDevice, stream()));
      LOOM_CUDA_CHECK(cudaEventRecord(b.copied, stream()));
    }
  }
  // Returns with `dst` written (after every kernel queued before).
  void to_host(void* dst, const void* src, size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    Buffer* pending = nullptr;  // the chunk in flight before this one
    size_t pending_off = 0, pending_len = 0;
    for (size_t off = 0; off < n; off += kChunk) {
      const size_t len = std::min(kChunk, n - off);
      Buffer& b = take();
      LOOM_CUDA_CHECK(cudaMemcpyAsync(b.host, static_cast<const char*>(src) + off, len,
                                      cudaMemcpyDeviceToHost, stream()));
      LOOM_CUDA_CHECK(cudaEventRecord(b.copied, stream()));
      if (pending) drain(*pending, static_cast<char*>(dst) + pending_off, pending_len);
      pending = &b, pending_off = off, pending_len = len;
    }
    if (pending) drain(*pending, static_cast<char*>(dst) + pending_off, pending_len);
  }

 private:
  struct Buffer {
    void* host = nullptr;
    cudaEvent_t copied = nullptr;  // recorded after the last copy from or into `host`
  };
  // The next buffer in turn, once its last copy has finished (allocated when first taken).
  Buffer& take() {
    Buffer& b = buffers_[turn_++ % 2];
    if (!b.host) {
      LOOM_CUDA_CHECK(cudaHostAlloc(&b.host, kChunk, cudaHostAllocDefault));
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming));
    } else {
      LOOM_CUDA_CHECK(cudaEventSynchronize(b.copied));
    }
    return b;
  }
  static void drain(Buffer& b, void* dst, size_t len) {
    LOOM_CUDA_CHECK(cudaEventSynchronize(b.copied));
    std::memcpy(dst, b.host, len);
  }

  std::mutex mutex_;  // the data loader's and the checkpoint saver's threads transfer too
  Buffer buffers_[2];
  unsigned turn_ = 0;
};

PinnedStaging& staging() {
  static PinnedStaging* s = new PinnedStaging();  // pinned until exit, never freed after CUDA
  return *s;
}

// src and dst of one dtype, both contiguous, on different sides.
void transfer(const Tensor& src, const Tensor& dst, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyHostToDevice)
    staging().to_device(dst.raw_ptr(), src.raw_ptr(), src.nbytes());
  else
    staging().to_host(dst.raw_ptr(), src.raw_ptr(), src.nbytes());
}

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  LOOM_CHECK(src.shape() == dst.shape())
      << "copy: source " << src.shape() << " and destination " << dst.shape() << " differ";
  if (src.numel() == 0) return;
  const bool src_host = src.device().type == DeviceType::CPU;
  const bool dst_host = dst.device().type == DeviceType::CPU;
  if (!src_host && !dst_host) return device_copy(src, dst);
  LOOM_CHECK(!(src_host && dst_host)) << "copy: the CUDA backend was given two host tensors";
  if (src_host) {
    // Host -> device: one transfer of a contiguous copy in the source dtype, then the device
    // converts and scatters.
    Tensor host = src;
    if (!dense(src)) {
      host = Tensor::empty(src.shape(), src.dtype(), cpu_device());
      cpu_backend().copy(src, host);
    }
    if (dense(dst) && dst.dtype() == src.dtype())
      return transfer(host, dst, cudaMemcpyHostToDevice);
    Tensor staged = Tensor::empty(src.shape(), src.dtype(), dst.device());
    transfer(host, staged, cudaMemcpyHostToDevice);
    return device_copy(staged, dst);
  }
  // Device -> host: the device gathers into a contiguous tensor of the source dtype, one
  // transfer, then the host converts and scatters.
  Tensor dev = src;
  if (!dense(src)) {
    dev = Tensor::empty(src.shape(), src.dtype(), src.device());
    device_copy(src, dev);
  }
  if (dense(dst) && dst.dtype() == src.dtype()) return transfer(dev, dst, cudaMemcpyDeviceToHost);
  Tensor host = Tensor::empty(src.shape(), src.dtype(), cpu_device());
  transfer(dev, host, cudaMemcpyDeviceToHost);
  cpu_backend().copy(host, dst);
}

namespace {
template <typename T>
__global__ void fill_kernel(T* p, T v, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    p[i] = v;
}
}  // namespace

void CudaBackend::fill(const Tensor& dst, double value) {
  LOOM_CHECK(dst.is_contiguous()) << "fill: destination " << dst.shape() << " not contiguous";
  const int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_any(dst.dtype(), [&](auto z) {
    using T = decltype(z);
    T v;
    if constexpr (std::is_integral_v<T>) {
      v = T(value);
    } else {
      v = Elem<T>::put(float(value));
    }
    LOOM_LAUNCH(fill_kernel<T>, blocks_for(n), kBlock, ptr<T>(dst), v, n);
  });
}

namespace {
struct RandomLayout {
  int dims = 0;
  int64_t shape[kMaxDims] = {};
  int64_t start[kMaxDims] = {};
  int64_t global_strides[kMaxDims] = {};
};

template <typename T>
__global__ void random_kernel(T* out, int64_t n, RandomLayout L, bool normal, uint64_t key, float a,
                              float b) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    // Local row-major index -> global row-major index.
    int64_t rest = i, global = 0;
    for (int d = L.dims - 1; d >= 0; --d) {
      const int64_t c = rest % L.shape[d];
      rest /= L.shape[d];
      global += (c + L.start[d]) * L.global_strides[d];
    }
    const float v = normal ? a + b * normal_at(key, uint64_t(global))
                           : a + (b - a) * uniform_at(key, uint64_t(global));
    out[i] = from_f32<T>(v);
  }
}
}  // namespace

void CudaBackend::random(RandomDist dist, uint64_t key, const Shape& global_shape,
                         const Shape& start, float a, float b, const Tensor& out) {
  LOOM_CHECK(out.is_contiguous()) << "random: output must be contiguous";
  LOOM_CHECK(out.dim() <= kMaxDims) << "random: at most " << kMaxDims << " dims";
  RandomLayout L;
  L.dims = int(out.dim());
  const Shape global_strides = contiguous_strides(global_shape);
  for (int d = 0; d < L.dims; ++d) {
    L.shape[d] = out.shape()[size_t(d)];
    L.start[d] = start[size_t(d)];
    L.global_strides[d] = global_strides[size_t(d)];
  }
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype(), "random", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(random_kernel<T>, blocks_for(n), kBlock, ptr<T>(out), n, L,
                dist == RandomDist::Normal, key, a, b);
  });
}

}  // namespace loom::LOOM_CUDA_NS
