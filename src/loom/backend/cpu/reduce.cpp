// Reductions of contiguous tensors (over the last dim, or over the middle of three dims),
// accumulated in f64 for sums (exact enough that reduction order never matters at f32
// precision).
#include <algorithm>
#include <cmath>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/scratch.h"
#include "loom/backend/kernel_checks.h"

namespace loom {

void CpuBackend::reduce_rows(ReduceOp op, const Tensor& x, const Tensor& out,
                             const Tensor& argmax) {
  check_reduce_rows(x, out);
  const int64_t rows = x.size(0), n = x.size(1);
  cpu::dispatch_float(x.dtype(), "reduce_rows", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    int64_t* ap = argmax.defined() ? argmax.data<int64_t>() : nullptr;
    if (op == ReduceOp::Sum) {
      if (rows < 4 && n >= 65536) {
        // Few long rows: parallelise within each row, then combine per-thread partial sums.
        for (int64_t r = 0; r < rows; ++r) {
          const T* row = xp + r * n;
          double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
          for (int64_t i = 0; i < n; ++i) total += double(to_f32(row[i]));
          o[r] = from_f32<T>(float(total));
        }
        return;
      }
      cpu::parallel_for(rows, n, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* row = xp + r * n;
          double total = 0.0;
          for (int64_t i = 0; i < n; ++i) total += double(to_f32(row[i]));
          o[r] = from_f32<T>(float(total));
        }
      });
    } else {
      cpu::parallel_for(rows, n, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* row = xp + r * n;
          float best = to_f32(row[0]);
          int64_t at = 0;
          for (int64_t i = 1; i < n; ++i) {
            const float v = to_f32(row[i]);
            if (v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              at = i;
            }
          }
          o[r] = from_f32<T>(best);
          if (ap) ap[r] = at;
        }
      });
    }
  });
}

void CpuBackend::sum_middle(const Tensor& x, const Tensor& out) {
  LOOM_CHECK(x.dim() == 3 && x.is_contiguous())
      << "sum_middle: expected contiguous (outer, n, inner), got " << x.shape();
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  LOOM_CHECK(out.numel() == outer * inner && out.dtype() == x.dtype() && out.is_contiguous())
      << "sum_middle: output " << out.shape() << " for input " << x.shape();
  // Work items: (outer index, chunk of rows); each sums its rows, whole rows streamed in
  // order, into f64 partials, and a second pass adds each column's partials in chunk order.
  // Splitting the rows keeps both cores busy on a bias gradient (one outer index, 12544
  // rows), and since a chunk is a fixed number of rows the result does not depend on the
  // thread count.
  constexpr int64_t kChunk = 512;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // f64 partials (outer, chunks, inner), in a float scratch buffer of twice the count.
  cpu::ScratchBuffer partial_storage(size_t(2 * outer * chunks * inner));
  double* partial = reinterpret_cast<double*>(partial_storage.data());
  cpu::dispatch_float(x.dtype(), "sum_middle", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(outer * chunks, kChunk * inner, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t i = item / chunks, r0 = item % chunks * kChunk;
        const int64_t rows = std::min(kChunk, n - r0);
        double* acc = partial + item * inner;
        std::fill_n(acc, inner, 0.0);
        const T* base = xp + (i * n + r0) * inner;
        // Four rows per pass over acc: a quarter of the accumulator loads and stores.
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
          const T* r0 = base + r * inner;
          const T *r1 = r0 + inner, *r2 = r1 + inner, *r3 = r2 + inner;
#pragma omp simd
          for (int64_t c = 0; c < inner; ++c)
            acc[c] += (double(to_f32(r0[c])) + double(to_f32(r1[c]))) +
                      (double(to_f32(r2[c])) + double(to_f32(r3[c])));
        }
        for (; r < rows; ++r) {
          const T* row = base + r * inner;
#pragma omp simd
          for (int64_t c = 0; c < inner; ++c) acc[c] += double(to_f32(row[c]));
        }
      }
    });
    cpu::parallel_for(outer * inner, chunks, [&](int64_t b, int64_t e) {
      for (int64_t col = b; col < e; ++col) {
        const int64_t i = col / inner, c = col % inner;
        double total = 0.0;
        for (int64_t chunk = 0; chunk < chunks; ++chunk)
          total += partial[(i * chunks + chunk) * inner + c];
        o[col] = from_f32<T>(float(total));
      }
    });
  });
}

}  // namespace loom
