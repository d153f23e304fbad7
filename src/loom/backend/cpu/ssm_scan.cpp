// Mamba-2's state-space scan on the CPU, one task per (batch, head), step by step: the state
// S (P x N, 16 KiB at Mamba-2's 64 x 64) stays in the core's cache while the task walks the
// sequence, each row updated (S = a S + dt x B^T) and read (y = S C) in one pass: O(T P N) in
// all, linear in the length, and nothing kept for the backward but a state every `every` steps.
//
// Backward, per task, chunk by chunk from the last: the chunk's states are recomputed from
// the checkpoint the forward kept at its start (so memory is one chunk of states, not T), then
// the steps run backwards with G = dL/dS_t, a_t = exp(dt_t A):
//   G += dy_t C_t^T;                dC_t = S_t^T dy_t;
//   dx_t = dt_t G B_t;              dB_t = dt_t G^T x_t;
//   ddt_t = <G, x_t B_t^T> + A a_t <G, S_{t-1}>;     dA += dt_t a_t <G, S_{t-1}>;
//   G = a_t G, the gradient reaching S_{t-1}.
// Each row's terms read only that row of G, so one pass over the rows does a step. What is
// left in G is the initial state's gradient. dB, dC and dA come out per head; the op sums the
// heads of each group.
#include <algorithm>
#include <cmath>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/scratch.h"
#include "loom/backend/kernel_checks.h"

namespace loom {

namespace {

// Pointers to one (batch, head)'s rows of the operands.
struct Task {
  const SsmScanDims& d;
  int64_t b, h, g;
  Task(const SsmScanDims& dims, int64_t t)
      : d(dims), b(t / dims.heads), h(t % dims.heads), g(h / (dims.heads / dims.groups)) {}
  int64_t bt(int64_t t) const { return b * d.steps + t; }
  // Offsets of step t: x/y rows (P), dt (one), B/C rows (N), per-head B/C gradient rows (N).
  int64_t x_at(int64_t t) const { return (bt(t) * d.heads + h) * d.head_dim; }
  int64_t dt_at(int64_t t) const { return bt(t) * d.heads + h; }
  int64_t bc_at(int64_t t) const { return (bt(t) * d.groups + g) * d.state; }
  int64_t head_bc_at(int64_t t) const { return (bt(t) * d.heads + h) * d.state; }
  int64_t state_at() const { return (b * d.heads + h) * d.head_dim * d.state; }
  int64_t checkpoint_at(int64_t c) const {
    return ((b * d.heads + h) * d.chunks + c) * d.head_dim * d.state;
  }
};

// S = a S + (dt x) B^T over P rows of N.
void update(float* S, float a, float dt, const float* x, const float* B, int64_t P, int64_t N) {
  for (int64_t p = 0; p < P; ++p) {
    const float xp = dt * x[p];
    float* row = S + p * N;
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) row[n] = a * row[n] + xp * B[n];
  }
}

}  // namespace

void CpuBackend::ssm_scan_forward(const Tensor& x, const Tensor& dt, const Tensor& A,
                                  const Tensor& Bm, const Tensor& Cm, const Tensor& state,
                                  const Tensor& y, const Tensor& checkpoints, int64_t every) {
  const SsmScanDims d = check_ssm_scan(x, dt, A, Bm, Cm, state, y, checkpoints, every);
  const int64_t P = d.head_dim, N = d.state;
  const float *xs = x.data<float>(), *dts = dt.data<float>(), *As = A.data<float>(),
              *Bs = Bm.data<float>(), *Cs = Cm.data<float>();
  float *ys = y.data<float>(), *states = state.data<float>(), *cks = checkpoints.data<float>();
  cpu::run_tasks(
      d.batch * d.heads, [] { return 0; },
      [&](int, int64_t task) {
        const Task k(d, task);
        float* S = states + k.state_at();
        for (int64_t t = 0; t < d.steps; ++t) {
          if (t % every == 0) std::copy(S, S + P * N, cks + k.checkpoint_at(t / every));
          const float step = dts[k.dt_at(t)], a = std::exp(step * As[k.h]);
          const float *xt = xs + k.x_at(t), *Bt = Bs + k.bc_at(t), *Ct = Cs + k.bc_at(t);
          float* out = ys + k.x_at(t);
          for (int64_t p = 0; p < P; ++p) {  // each row updated and read in one pass
            float* row = S + p * N;
            const float xp = step * xt[p];
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t n = 0; n < N; ++n) {
              row[n] = a * row[n] + xp * Bt[n];
              sum += row[n] * Ct[n];
            }
            out[p] = sum;
          }
        }
      });
}

void CpuBackend::ssm_scan_backward(const Tensor& x, const Tensor& dt, const Tensor& A,
                                   const Tensor& Bm, const Tensor& Cm, const Tensor& checkpoints,
                                   int64_t every, const Tensor& dy, const Tensor& dstate,
                                   const Tensor& dx, const Tensor& ddt, const Tensor& dA,
                                   const Tensor& dB, const Tensor& dC) {
  const SsmScanDims d = check_ssm_scan(x, dt, A, Bm, Cm, Tensor(), Tensor(), checkpoints, every);
  check_ssm_scan_gradients(d, dy, dstate, dx, ddt, dA, dB, dC);
  const int64_t P = d.head_dim, N = d.state, PN = P * N;
  const float *xs = x.data<float>(), *dts = dt.data<float>(), *As = A.data<float>(),
              *Bs = Bm.data<float>(), *Cs = Cm.data<float>(), *cks = checkpoints.data<float>(),
              *dys = dy.data<float>();
  float *G_all = dstate.data<float>(), *dxs = dx.data<float>(), *ddts = ddt.data<float>(),
        *dAs = dA.data<float>(), *dBs = dB.data<float>(), *dCs = dC.data<float>();
  struct Scratch {
    cpu::ScratchBuffer states, now;  // the chunk's states entering each step; S_t
  };
  cpu::run_tasks(
      d.batch * d.heads,
      [&] {
        return Scratch{cpu::ScratchBuffer(size_t(every * PN)), cpu::ScratchBuffer(size_t(PN))};
      },
      [&](Scratch& w, int64_t task) {
        const Task k(d, task);
        const float a_rate = As[k.h];
        float* G = G_all + k.state_at();
        float* entering = w.states.data();
        float* S = w.now.data();
        double dA_sum = 0;
        for (int64_t c = d.chunks - 1; c >= 0; --c) {
          const int64_t t0 = c * every, t1 = std::min(d.steps, t0 + every);
          // The chunk's states again, from its checkpoint.
          std::copy(cks + k.checkpoint_at(c), cks + k.checkpoint_at(c) + PN, S);
          for (int64_t t = t0; t < t1; ++t) {
            std::copy(S, S + PN, entering + (t - t0) * PN);
            const float step = dts[k.dt_at(t)];
            update(S, std::exp(step * a_rate), step, xs + k.x_at(t), Bs + k.bc_at(t), P, N);
          }
          for (int64_t t = t1 - 1; t >= t0; --t) {
            const float step = dts[k.dt_at(t)], a = std::exp(step * a_rate);
            const float *xt = xs + k.x_at(t), *Bt = Bs + k.bc_at(t), *Ct = Cs + k.bc_at(t),
                        *dyt = dys + k.x_at(t), *prev = entering + (t - t0) * PN;
            float *dCt = dCs + k.head_bc_at(t), *dBt = dBs + k.head_bc_at(t),
                  *dxt = dxs + k.x_at(t);
            // S_t = a S_{t-1} + dt x B^T, recomputed row by row where it is read.
            std::fill(dCt, dCt + N, 0.0f);
            std::fill(dBt, dBt + N, 0.0f);
            float through_input = 0, through_decay = 0;  // <G, x B^T>, <G, S_{t-1}>
            for (int64_t p = 0; p < P; ++p) {
              const float *prev_row = prev + p * N, xp = xt[p], dyp = dyt[p];
              float* g = G + p * N;
              float dx_p = 0, decay_p = 0;
#pragma omp simd reduction(+ : dx_p, decay_p)
              for (int64_t n = 0; n < N; ++n) {
                dCt[n] += (a * prev_row[n] + step * xp * Bt[n]) * dyp;
                g[n] += dyp * Ct[n];
                dBt[n] += g[n] * xp;
                dx_p += g[n] * Bt[n];
                decay_p += g[n] * prev_row[n];
                g[n] *= a;  // the row's gradient reaching S_{t-1}: no later use at step t
              }
              dxt[p] = step * dx_p;
              through_input += xp * dx_p;
              through_decay += decay_p;
            }
            for (int64_t n = 0; n < N; ++n) dBt[n] *= step;
            ddts[k.dt_at(t)] = through_input + a_rate * a * through_decay;
            dA_sum += double(step) * double(a) * double(through_decay);
          }
        }
        dAs[task] = float(dA_sum);
      });
}

}  // namespace loom
