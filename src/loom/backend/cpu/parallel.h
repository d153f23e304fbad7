// OpenMP helpers for CPU kernels.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

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

// Runs fn(scratch, t) for t in [0, tasks) on one OpenMP team; each thread builds its Scratch
// with make_scratch first, whether or not it gets a task: then every call takes the same
// buffers from the caching allocator, and a step that finds a thread busier than in the last
// one makes no new system allocation. Dynamic scheduling, because under a causal
// mask later query blocks carry more key blocks (attention). An exception cannot cross the parallel
// region, so the first one is carried out and rethrown here.
template <typename MakeScratch, typename Fn>
void run_tasks(int64_t tasks, MakeScratch make_scratch, Fn fn) {
  if (tasks <= 0) return;
  // At least two threads whenever two are allowed, even for a single task: oneDNN (dnnl_sgemm,
  // primitives) runs sequentially only inside an active parallel region. Forking it for every small
  // tile product would cost more than it gains, and could change the bits with the thread count.
  const int max_threads = omp_get_max_threads();
  const int threads = omp_in_parallel()
                          ? 1
                          : int(std::clamp<int64_t>(tasks, std::min(max_threads, 2), max_threads));
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    try {
      auto scratch = make_scratch();
      // nowait: a thread that throws leaves the loop without waiting at its barrier.
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t t = 0; t < tasks; ++t) fn(scratch, t);
    } catch (...) {
#pragma omp critical(loom_run_tasks_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace loom::cpu
