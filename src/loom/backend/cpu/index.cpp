// index_select / index_add and gather / scatter_add on contiguous tensors.
// Every index is checked against its dim before anything is written.
#include <cstring>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"

namespace loom {

namespace {

void check_indices(const char* op, const Tensor& index, int64_t limit, int64_t dim,
                   const Shape& shape) {
  const int64_t* ip = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)
    LOOM_CHECK(ip[i] >= 0 && ip[i] < limit)
        << op << ": index " << ip[i] << " at position " << i << " is out of range for dim " << dim
        << " of size " << limit << " (tensor shape " << shape << ")";
}

// (outer, size of dim, inner) of a contiguous shape.
void split_at(const Shape& s, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) inner *= s[d];
}

}  // namespace

void CpuBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index,
                              const Tensor& out) {
  check_indices("index_select", index, x.size(dim), dim, x.shape());
  int64_t outer, inner;
  split_at(x.shape(), dim, outer, inner);
  const int64_t n_src = x.size(dim), n_idx = index.numel();
  const size_t bytes = size_t(inner) * dtype_size(x.dtype());
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  const int64_t* ip = index.data<int64_t>();
  cpu::parallel_for(outer * n_idx, inner, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t o = k / n_idx, j = k % n_idx;
      std::memcpy(op + size_t(k) * bytes, xp + size_t(o * n_src + ip[j]) * bytes, bytes);
    }
  });
}

void CpuBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_indices("index_add", index, out.size(dim), dim, out.shape());
  int64_t outer, inner;
  split_at(out.shape(), dim, outer, inner);
  const int64_t n_dst = out.size(dim), n_idx = index.numel();
  const int64_t* ip = index.data<int64_t>();
  cpu::dispatch_float(out.dtype(), "index_add", [&](auto z) {
    using T = decltype(z);
    T* op = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    // Parallel over the inner (feature) dim so repeated indices never race.
    cpu::parallel_for(inner, outer * n_idx, [&](int64_t cb, int64_t ce) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n_idx; ++j) {
          T* dst = op + (o * n_dst + ip[j]) * inner;
          const T* s = sp + (o * n_idx + j) * inner;
          for (int64_t c = cb; c < ce; ++c) dst[c] = from_f32<T>(to_f32(dst[c]) + to_f32(s[c]));
        }
    });
  });
}

namespace {

// Visits every element of `index` (contiguous), giving its own linear position and the
// linear position in the (contiguous) `target` shape with coordinate `dim` replaced by the
// index value.
template <typename Fn>
void for_each_indexed(const Tensor& index, const Shape& target, int64_t dim, Fn fn) {
  const Shape& is = index.shape();
  const Shape ts = contiguous_strides(target);
  const int64_t* ip = index.data<int64_t>();
  const int64_t n = index.numel(), rank = index.dim();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, pos = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t c = rest % is[size_t(d)];
      rest /= is[size_t(d)];
      pos += (d == dim ? ip[i] : c) * ts[size_t(d)];
    }
    fn(i, pos);
  }
}

}  // namespace

void CpuBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  check_indices("gather", index, x.size(dim), dim, x.shape());
  cpu::dispatch_float(x.dtype(), "gather", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    for_each_indexed(index, x.shape(), dim, [&](int64_t i, int64_t pos) { op[i] = xp[pos]; });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                             const Tensor& src) {
  check_indices("scatter_add", index, out.size(dim), dim, out.shape());
  cpu::dispatch_float(out.dtype(), "scatter_add", [&](auto z) {
    using T = decltype(z);
    T* op = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    for_each_indexed(index, out.shape(), dim, [&](int64_t i, int64_t pos) {
      op[pos] = from_f32<T>(to_f32(op[pos]) + to_f32(sp[i]));
    });
  });
}

}  // namespace loom
