// Reductions of contiguous tensors (over the last dim, or over the middle of three dims),
// accumulated in f64 for sums (exact enough that reduction order never matters at f32
// precision).
#include <algorithm>
#include <cmath>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"

namespace loom {

void CpuBackend::reduce_rows(ReduceOp op, const Tensor& x, const Tensor& out,
                             const Tensor& argmax) {
  LOOM_CHECK(x.dim() == 2 && x.is_contiguous()) << "reduce_rows: expected contiguous (rows, n), got "
                                                << x.shape();
  const int64_t rows = x.size(0), n = x.size(1);
  LOOM_CHECK(out.numel() == rows && out.dtype() == x.dtype())
      << "reduce_rows: output " << out.shape() << " for input " << x.shape();
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
  // Work items: (outer index, column block); each sums its n rows into f64 accumulators.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  cpu::dispatch_float(x.dtype(), "sum_middle", [&](auto z) {
    using T = decltype(z);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(outer * blocks, n * kBlock, [&](int64_t b, int64_t e) {
      double acc[kBlock];
      for (int64_t item = b; item < e; ++item) {
        const int64_t i = item / blocks, c0 = (item % blocks) * kBlock;
        const int64_t w = std::min(kBlock, inner - c0);
        std::fill_n(acc, w, 0.0);
        const T* base = xp + i * n * inner + c0;
        for (int64_t r = 0; r < n; ++r) {
          const T* row = base + r * inner;
          for (int64_t c = 0; c < w; ++c) acc[c] += double(to_f32(row[c]));
        }
        for (int64_t c = 0; c < w; ++c) o[i * inner + c0 + c] = from_f32<T>(float(acc[c]));
      }
    });
  });
}

}  // namespace loom
