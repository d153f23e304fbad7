// index_select / index_add and gather / scatter_add on contiguous tensors. Every index is
// checked on the host (one small copy) before anything is written, with the CPU's message.
// The accumulating kernels are deterministic: each output element is summed by one thread
// in index order, as on the CPU.
#include <algorithm>
#include <numeric>
#include <vector>

#include "loom/backend/cuda/cuda_backend.h"

namespace loom::LOOM_CUDA_NS {

namespace {

std::vector<int64_t> host_indices(const Tensor& index) {
  LOOM_CHECK(index.dtype() == DType::I64 && index.is_contiguous())
      << "index: expected contiguous i64 indices, got " << dtype_name(index.dtype());
  std::vector<int64_t> v(size_t(index.numel()));
  if (!v.empty()) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(v.data(), index.raw_ptr(), v.size() * sizeof(int64_t),
                                    cudaMemcpyDeviceToHost, stream()));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  return v;
}

std::vector<int64_t> checked_indices(const char* op, const Tensor& index, int64_t limit,
                                     int64_t dim, const Shape& shape) {
  std::vector<int64_t> ip = host_indices(index);
  for (size_t i = 0; i < ip.size(); ++i)
    LOOM_CHECK(ip[i] >= 0 && ip[i] < limit)
        << op << ": index " << ip[i] << " at position " << i << " is out of range for dim " << dim
        << " of size " << limit << " (tensor shape " << shape << ")";
  return ip;
}

// A host vector on the device, freed with the returned tensor.
Tensor upload(const std::vector<int64_t>& v, Device device) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::I64, device);
  if (!v.empty()) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(t.raw_ptr(), v.data(), v.size() * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, stream()));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));  // v may go away
  }
  return t;
}

void split_at(const Shape& s, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) inner *= s[d];
}

template <typename T>
__global__ void index_select_kernel(const T* x, const int64_t* index, int64_t outer, int64_t n_src,
                                    int64_t n_idx, int64_t inner, T* out) {
  LOOM_GRID_STRIDE(i, outer * n_idx * inner) {
    const int64_t c = i % inner, k = i / inner;
    const int64_t o = k / n_idx, j = k % n_idx;
    out[i] = x[(o * n_src + index[j]) * inner + c];
  }
}

// Segment s of the index positions grouped by value (order[begin[s] .. begin[s+1]), ascending
// within): thread (o, s, c) adds the segment's rows of src into out[o, value[s], c] in order.
template <typename T>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* order, const int64_t* begin,
                                 const int64_t* value, int64_t segments, int64_t outer,
                                 int64_t n_dst, int64_t n_idx, int64_t inner) {
  LOOM_GRID_STRIDE(i, outer * segments * inner) {
    const int64_t c = i % inner, k = i / inner;
    const int64_t o = k / segments, s = k % segments;
    T* dst = out + (o * n_dst + value[s]) * inner + c;
    float acc = to_f32(*dst);
    for (int64_t p = begin[s]; p < begin[s + 1]; ++p)
      acc = to_f32(from_f32<T>(acc + to_f32(src[(o * n_idx + order[p]) * inner + c])));
    *dst = from_f32<T>(acc);
  }
}

}  // namespace

void CudaBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index,
                               const Tensor& out) {
  checked_indices("index_select", index, x.size(dim), dim, x.shape());
  int64_t outer, inner;
  split_at(x.shape(), dim, outer, inner);
  const int64_t n_src = x.size(dim), n_idx = index.numel(), n = outer * n_idx * inner;
  if (n == 0) return;
  // Any dtype: copied as elements of its size.
  auto run = [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(index_select_kernel<T>, blocks_for(n), kBlock, ptr<const T>(x),
                ptr<const int64_t>(index), outer, n_src, n_idx, inner, ptr<T>(out));
  };
  switch (dtype_size(x.dtype())) {
    case 1:
      return run(uint8_t{});
    case 2:
      return run(uint16_t{});
    case 4:
      return run(uint32_t{});
    default:
      return run(uint64_t{});
  }
}

void CudaBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index,
                            const Tensor& src) {
  const std::vector<int64_t> ip =
      checked_indices("index_add", index, out.size(dim), dim, out.shape());
  int64_t outer, inner;
  split_at(out.shape(), dim, outer, inner);
  const int64_t n_dst = out.size(dim), n_idx = index.numel();
  if (n_idx == 0 || outer * inner == 0) return;
  // The positions grouped by index value, ascending within a group (a stable sort).
  std::vector<int64_t> order(ip.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ip[size_t(a)] < ip[size_t(b)]; });
  std::vector<int64_t> begin, value;
  for (size_t p = 0; p < order.size(); ++p)
    if (p == 0 || ip[size_t(order[p])] != ip[size_t(order[p - 1])]) {
      begin.push_back(int64_t(p));
      value.push_back(ip[size_t(order[p])]);
    }
  const int64_t segments = int64_t(value.size());
  begin.push_back(int64_t(order.size()));
  const Tensor d_order = upload(order, out.device()), d_begin = upload(begin, out.device()),
               d_value = upload(value, out.device());
  dispatch_float(out.dtype(), "index_add", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(index_add_kernel<T>, blocks_for(outer * segments * inner), kBlock, ptr<T>(out),
                ptr<const T>(src), ptr<const int64_t>(d_order), ptr<const int64_t>(d_begin),
                ptr<const int64_t>(d_value), segments, outer, n_dst, n_idx, inner);
  });
}

namespace {

// The index's shape and the (contiguous) target's strides: element i of the index names the
// target element with the index's coordinates, coordinate `dim` replaced by the index value
// (as the CPU's for_each_indexed does).
struct IndexedLayout {
  int dims = 0, dim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t target_strides[kMaxDims] = {};
  // Linear index of the index element with coordinate j at `dim` on line `line` (the lines
  // enumerate every other coordinate, row-major), and the target position for value v.
  LOOM_HD int64_t element(int64_t line, int64_t j) const {
    int64_t rest = line, pos = 0, stride = 1;
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t c = d == dim ? j : rest % shape[d];
      if (d != dim) rest /= shape[d];
      pos += c * stride;
      stride *= shape[d];
    }
    return pos;
  }
  LOOM_HD int64_t target(int64_t i, int64_t v) const {
    int64_t rest = i, pos = 0;
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t c = rest % shape[d];
      rest /= shape[d];
      pos += (d == dim ? v : c) * target_strides[d];
    }
    return pos;
  }
};

IndexedLayout indexed_layout(const Tensor& index, const Shape& target, int64_t dim) {
  LOOM_CHECK(index.dim() <= kMaxDims && index.dim() == int64_t(target.size()))
      << "gather/scatter: index " << index.shape() << " for target " << shape_str(target);
  IndexedLayout L;
  L.dims = int(index.dim());
  L.dim = int(dim);
  const Shape ts = contiguous_strides(target);
  for (int d = 0; d < L.dims; ++d) {
    L.shape[d] = index.shape()[size_t(d)];
    L.target_strides[d] = ts[size_t(d)];
  }
  return L;
}

template <typename T>
__global__ void gather_kernel(const T* x, const int64_t* index, IndexedLayout L, int64_t n,
                              T* out) {
  LOOM_GRID_STRIDE(i, n) {
    out[i] = x[L.target(i, index[i])];
  }
}

// One thread per line along `dim`, walking it in order: repeated targets on a line are added
// in index order, and two lines never share a target element (their other coordinates differ).
template <typename T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, IndexedLayout L,
                                   int64_t lines) {
  LOOM_GRID_STRIDE(line, lines) {
    for (int64_t j = 0; j < L.shape[L.dim]; ++j) {
      const int64_t i = L.element(line, j);
      T* dst = out + L.target(i, index[i]);
      *dst = from_f32<T>(to_f32(*dst) + to_f32(src[i]));
    }
  }
}

}  // namespace

void CudaBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  checked_indices("gather", index, x.size(dim), dim, x.shape());
  const int64_t n = index.numel();
  if (n == 0) return;
  const IndexedLayout L = indexed_layout(index, x.shape(), dim);
  dispatch_float(x.dtype(), "gather", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(gather_kernel<T>, blocks_for(n), kBlock, ptr<const T>(x), ptr<const int64_t>(index),
                L, n, ptr<T>(out));
  });
}

void CudaBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                              const Tensor& src) {
  checked_indices("scatter_add", index, out.size(dim), dim, out.shape());
  if (index.numel() == 0) return;
  const IndexedLayout L = indexed_layout(index, out.shape(), dim);
  const int64_t lines = index.numel() / index.size(dim);
  dispatch_float(out.dtype(), "scatter_add", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(scatter_add_kernel<T>, blocks_for(lines), kBlock, ptr<T>(out),
                ptr<const int64_t>(index), ptr<const T>(src), L, lines);
  });
}

}  // namespace loom::LOOM_CUDA_NS
