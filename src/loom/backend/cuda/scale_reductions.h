// The reductions the low-precision casts share (fp8.cu, block_scaling.cu): a tensor's largest
// finite magnitude and its count of non-finite values, in fixed runs; and the casts' per-block
// saturated / flushed counts added into a stats buffer. No atomics: the same sums every run.
#pragma once
#include <cstdint>

#include "loom/backend/cuda/device_code.h"

namespace loom::LOOM_CUDA_NS {

constexpr int64_t kAmaxRun = 4096;

// The runs of kAmaxRun elements over n (at least 1).
int64_t amax_runs(int64_t n);
// partial[2 r], partial[2 r + 1]: run r's largest finite magnitude and its non-finite count.
void launch_amax_runs(const float* x, int64_t n, double* partial);
// stats[1] += the sum of counts[2 b], stats[2] += the sum of counts[2 b + 1], b < blocks.
void launch_add_counts(const double* counts, int64_t blocks, int64_t* stats);

}  // namespace loom::LOOM_CUDA_NS
