// Softmax / log-softmax over rows, and the fused cross-entropy that never materialises them.
// One block per row; the log-sum-exp is taken stably in f32.
#include <vector>

#include "loom/backend/cuda/cuda_backend.h"

namespace loom::LOOM_CUDA_NS {

namespace {

template <typename T>
__device__ inline float row_logsumexp(const T* row, int64_t n) {
  float m = -INFINITY;
  LOOM_BLOCK_STRIDE(i, n) m = fmaxf(m, to_f32(row[i]));
  m = block_max(m);
  if (isinf(m)) return m;  // all -inf (or +inf present)
  float s = 0.0f;
  LOOM_BLOCK_STRIDE(i, n) s += expf(to_f32(row[i]) - m);
  return m + logf(block_sum(s));
}

template <typename T>
__global__ void softmax_kernel(const T* x, int64_t rows, int64_t n, bool log, T* y) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    const float lse = row_logsumexp(row, n);
    LOOM_BLOCK_STRIDE(i, n) {
      const float v = to_f32(row[i]) - lse;
      y[r * n + i] = from_f32<T>(log ? v : expf(v));
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* gy, int64_t rows, int64_t n, bool log,
                                        T* gx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * n;
    const T* gr = gy + r * n;
    // log: y = x - lse, gx = g - softmax * sum(g); else gx = y * (g - sum(g * y)).
    float s = 0.0f;
    LOOM_BLOCK_STRIDE(i, n) s += log ? to_f32(gr[i]) : to_f32(gr[i]) * to_f32(yr[i]);
    s = block_sum(s);
    LOOM_BLOCK_STRIDE(i, n) {
      const float yv = to_f32(yr[i]), g = to_f32(gr[i]);
      gx[r * n + i] = from_f32<T>(log ? g - expf(yv) * s : yv * (g - s));
    }
  }
}

template <typename T>
__global__ void cross_entropy_kernel(const T* logits, const int64_t* targets, int64_t N, int64_t V,
                                     int64_t ignore_index, float* loss, float* lse) {
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* row = logits + r * V;
    const float l = row_logsumexp(row, V);
    if (threadIdx.x == 0) {
      const int64_t t = targets[r];
      lse[r] = l;
      loss[r] = t == ignore_index ? 0.0f : l - to_f32(row[t]);
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets,
                                              const float* lse, const float* gloss, int64_t N,
                                              int64_t V, int64_t ignore_index, T* glogits) {
  LOOM_GRID_STRIDE(i, N * V) {
    const int64_t r = i / V, c = i % V;
    const int64_t t = targets[r];
    float g = 0.0f;
    if (t != ignore_index) {
      // Rounded to the storage type before the target's -g, as the CPU does.
      g = to_f32(from_f32<T>(gloss[r] * expf(to_f32(logits[i]) - lse[r])));
      if (c == t) g -= gloss[r];
    }
    glogits[i] = from_f32<T>(g);
  }
}

void check_targets(const Tensor& targets, int64_t V, int64_t ignore_index) {
  std::vector<int64_t> t(size_t(targets.numel()));
  if (!t.empty()) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(t.data(), targets.raw_ptr(), t.size() * sizeof(int64_t),
                                    cudaMemcpyDeviceToHost, stream()));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  for (size_t r = 0; r < t.size(); ++r)
    LOOM_CHECK(t[r] == ignore_index || (t[r] >= 0 && t[r] < V))
        << "cross_entropy: target " << t[r] << " at position " << r << " is outside [0, " << V
        << ") and is not ignore_index (" << ignore_index << ")";
}

}  // namespace

void CudaBackend::softmax_forward(const Tensor& x, bool log, const Tensor& y) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  dispatch_float(x.dtype(), "softmax", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(softmax_kernel<T>, blocks_for(rows, 1), kBlock, ptr<const T>(x), rows, n, log,
                ptr<T>(y));
  });
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& gy, bool log, const Tensor& gx) {
  const int64_t rows = y.size(0), n = y.size(1);
  if (rows == 0) return;
  dispatch_float(y.dtype(), "softmax_backward", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(softmax_backward_kernel<T>, blocks_for(rows, 1), kBlock, ptr<const T>(y),
                ptr<const T>(gy), rows, n, log, ptr<T>(gx));
  });
}

void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                        int64_t ignore_index, const Tensor& loss,
                                        const Tensor& lse) {
  const int64_t N = logits.size(0), V = logits.size(1);
  check_targets(targets, V, ignore_index);
  if (N == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(cross_entropy_kernel<T>, blocks_for(N, 1), kBlock, ptr<const T>(logits),
                ptr<const int64_t>(targets), N, V, ignore_index, ptr<float>(loss), ptr<float>(lse));
  });
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                         int64_t ignore_index, const Tensor& lse,
                                         const Tensor& gloss, const Tensor& glogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N * V == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(cross_entropy_backward_kernel<T>, blocks_for(N * V), kBlock, ptr<const T>(logits),
                ptr<const int64_t>(targets), ptr<const float>(lse), ptr<const float>(gloss), N, V,
                ignore_index, ptr<T>(glogits));
  });
}

}  // namespace loom::LOOM_CUDA_NS
