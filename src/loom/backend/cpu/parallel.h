// OpenMP helpers for CPU kernels.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace loom::cpu {

// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread, when the
// work (n * cost_per_item, in rough flops) is large enough to repay the fork.
template <typename Fn>
void parallel_for(int64_t n, int64_t cost_per_item, Fn fn) {
  if (n <= 0) return;
  const int64_t work = n * std::max<int64_t>(cost_per_item, 1);
  const int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int threads =
      int(std::min<int64_t>({int64_t(max_threads), n, std::max<int64_t>(work / 32768, 1)}));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace loom::cpu
