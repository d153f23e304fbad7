// Mamba-2's state-space scan (backend.h: ssm_scan_forward / ssm_scan_backward), written to be
// right first, as the attention kernels here: one block per (batch, head) walks the sequence;
// its threads share the state's P rows, which live in global memory (the state output in the
// forward, a scratch copy in the backward), so any block size works (the host emulation runs
// one thread a block). The backward recomputes each chunk's states from the forward's
// checkpoint into scratch, then runs the steps backwards as the CPU kernel does
// (backend/cpu/ssm_scan.cpp, which states the equations); reductions over P go through
// block_sum, those over N (dB, dC) loop over the rows per column.
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/kernel_checks.h"

namespace loom::LOOM_CUDA_NS {

namespace {

struct Scan {
  int64_t batch, steps, heads, head_dim, groups, state, chunks, every;
  const float *x, *dt, *A, *B, *C;
  float* checkpoints;
  LOOM_HD int64_t x_at(int64_t b, int64_t t, int64_t h) const {
    return ((b * steps + t) * heads + h) * head_dim;
  }
  LOOM_HD int64_t dt_at(int64_t b, int64_t t, int64_t h) const {
    return (b * steps + t) * heads + h;
  }
  LOOM_HD int64_t bc_at(int64_t b, int64_t t, int64_t h) const {
    return ((b * steps + t) * groups + h / (heads / groups)) * state;
  }
  LOOM_HD int64_t head_bc_at(int64_t b, int64_t t, int64_t h) const {
    return ((b * steps + t) * heads + h) * state;
  }
  LOOM_HD int64_t checkpoint_at(int64_t b, int64_t h, int64_t c) const {
    return ((b * heads + h) * chunks + c) * head_dim * state;
  }
};

Scan scan_of(const SsmScanDims& d, int64_t every, const Tensor& x, const Tensor& dt,
             const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& checkpoints) {
  return {d.batch,        d.steps,
          d.heads,        d.head_dim,
          d.groups,       d.state,
          d.chunks,       every,
          ptr<float>(x),  ptr<float>(dt),
          ptr<float>(A),  ptr<float>(Bm),
          ptr<float>(Cm), ptr<float>(checkpoints)};
}

// S rows p of one (batch, head): S = a S + dt x B^T.
LOOM_HD inline void update_row(float* row, float a, float xp, const float* B, int64_t N) {
  for (int64_t n = 0; n < N; ++n) row[n] = a * row[n] + xp * B[n];
}

__global__ void ssm_scan_forward_kernel(Scan s, float* state, float* y) {
  const int64_t b = blockIdx.x / s.heads, h = blockIdx.x % s.heads;
  const int64_t P = s.head_dim, N = s.state;
  float* S = state + (b * s.heads + h) * P * N;
  const float rate = s.A[h];
  for (int64_t t = 0; t < s.steps; ++t) {
    const float step = s.dt[s.dt_at(b, t, h)], a = expf(step * rate);
    const float *x = s.x + s.x_at(b, t, h), *B = s.B + s.bc_at(b, t, h),
                *C = s.C + s.bc_at(b, t, h);
    float* out = y + s.x_at(b, t, h);
    LOOM_BLOCK_STRIDE(p, P) {
      float* row = S + p * N;
      if (t % s.every == 0) {
        float* keep = s.checkpoints + s.checkpoint_at(b, h, t / s.every) + p * N;
        for (int64_t n = 0; n < N; ++n) keep[n] = row[n];
      }
      update_row(row, a, step * x[p], B, N);
      float sum = 0.0f;
      for (int64_t n = 0; n < N; ++n) sum += row[n] * C[n];
      out[p] = sum;
    }
  }
}

// entering: scratch (B H, every, P, N); G: the gradient of the state (B, H, P, N) in and out.
__global__ void ssm_scan_backward_kernel(Scan s, const float* dy, float* G_all, float* entering,
                                         float* dx, float* ddt, float* dA, float* dB, float* dC) {
  const int64_t bh = blockIdx.x, b = bh / s.heads, h = bh % s.heads;
  const int64_t P = s.head_dim, N = s.state, PN = P * N;
  float* G = G_all + bh * PN;
  float* kept = entering + bh * s.every * PN;
  const float rate = s.A[h];
  float dA_sum = 0.0f;
  for (int64_t c = s.chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * s.every, t1 = t0 + s.every < s.steps ? t0 + s.every : s.steps;
    // The chunk's states again: each thread its rows, from the checkpoint.
    LOOM_BLOCK_STRIDE(p, P) {
      const float* from = s.checkpoints + s.checkpoint_at(b, h, c) + p * N;
      float* row = kept + p * N;  // slot 0 holds S_{t0 - 1}; slot t - t0 the state entering t
      for (int64_t n = 0; n < N; ++n) row[n] = from[n];
      for (int64_t t = t0; t + 1 < t1; ++t) {
        float* next = kept + (t + 1 - t0) * PN + p * N;
        for (int64_t n = 0; n < N; ++n) next[n] = kept[(t - t0) * PN + p * N + n];
        const float step = s.dt[s.dt_at(b, t, h)];
        update_row(next, expf(step * rate), step * s.x[s.x_at(b, t, h) + p], s.B + s.bc_at(b, t, h),
                   N);
      }
    }
    __syncthreads();
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const float step = s.dt[s.dt_at(b, t, h)], a = expf(step * rate);
      const float *x = s.x + s.x_at(b, t, h), *B = s.B + s.bc_at(b, t, h),
                  *C = s.C + s.bc_at(b, t, h), *dyt = dy + s.x_at(b, t, h);
      const float* prev = kept + (t - t0) * PN;
      // G += dy C^T (each thread its rows).
      LOOM_BLOCK_STRIDE(p, P) {
        for (int64_t n = 0; n < N; ++n) G[p * N + n] += dyt[p] * C[n];
      }
      __syncthreads();
      // Per column n: dC = S_t^T dy (S_t recomputed), dB = dt G^T x.
      LOOM_BLOCK_STRIDE(n, N) {
        float c_sum = 0.0f, b_sum = 0.0f;
        for (int64_t p = 0; p < P; ++p) {
          c_sum += (a * prev[p * N + n] + step * x[p] * B[n]) * dyt[p];
          b_sum += G[p * N + n] * x[p];
        }
        dC[s.head_bc_at(b, t, h) + n] = c_sum;
        dB[s.head_bc_at(b, t, h) + n] = step * b_sum;
      }
      // Per row p: dx = dt G B; the sums <G, x B^T> and <G, S_{t-1}> over the block.
      float through_input = 0.0f, through_decay = 0.0f;
      LOOM_BLOCK_STRIDE(p, P) {
        float gb = 0.0f, gs = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
          gb += G[p * N + n] * B[n];
          gs += G[p * N + n] * prev[p * N + n];
        }
        dx[s.x_at(b, t, h) + p] = step * gb;
        through_input += x[p] * gb;
        through_decay += gs;
      }
      through_input = block_sum(through_input);
      through_decay = block_sum(through_decay);
      if (threadIdx.x == 0) ddt[s.dt_at(b, t, h)] = through_input + rate * a * through_decay;
      dA_sum += step * a * through_decay;
      __syncthreads();
      LOOM_BLOCK_STRIDE(p, P) {
        for (int64_t n = 0; n < N; ++n) G[p * N + n] *= a;
      }
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) dA[bh] = dA_sum;
}

unsigned threads_for(int64_t P) {
  return unsigned(P < 32 ? 32 : P > 256 ? 256 : (P + 31) / 32 * 32);
}

}  // namespace

void CudaBackend::ssm_scan_forward(const Tensor& x, const Tensor& dt, const Tensor& A,
                                   const Tensor& Bm, const Tensor& Cm, const Tensor& state,
                                   const Tensor& y, const Tensor& checkpoints, int64_t every) {
  const SsmScanDims d = check_ssm_scan(x, dt, A, Bm, Cm, state, y, checkpoints, every);
  if (d.batch * d.heads == 0) return;
  LOOM_LAUNCH(ssm_scan_forward_kernel, unsigned(d.batch * d.heads), threads_for(d.head_dim),
              scan_of(d, every, x, dt, A, Bm, Cm, checkpoints), ptr<float>(state), ptr<float>(y));
}

void CudaBackend::ssm_scan_backward(const Tensor& x, const Tensor& dt, const Tensor& A,
                                    const Tensor& Bm, const Tensor& Cm, const Tensor& checkpoints,
                                    int64_t every, const Tensor& dy, const Tensor& dstate,
                                    const Tensor& dx, const Tensor& ddt, const Tensor& dA,
                                    const Tensor& dB, const Tensor& dC) {
  const SsmScanDims d = check_ssm_scan(x, dt, A, Bm, Cm, Tensor(), Tensor(), checkpoints, every);
  check_ssm_scan_gradients(d, dy, dstate, dx, ddt, dA, dB, dC);
  if (d.batch * d.heads == 0) return;
  // The chunk's states, every (batch, head) at once: floats in an f64 scratch.
  const Tensor entering =
      scratch_f64((d.batch * d.heads * every * d.head_dim * d.state + 1) / 2, x.device());
  LOOM_LAUNCH(ssm_scan_backward_kernel, unsigned(d.batch * d.heads), threads_for(d.head_dim),
              scan_of(d, every, x, dt, A, Bm, Cm, checkpoints), ptr<float>(dy), ptr<float>(dstate),
              static_cast<float*>(entering.raw_ptr()), ptr<float>(dx), ptr<float>(ddt),
              ptr<float>(dA), ptr<float>(dB), ptr<float>(dC));
}

}  // namespace loom::LOOM_CUDA_NS
