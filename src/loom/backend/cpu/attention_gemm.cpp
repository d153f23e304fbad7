// bf16 attention over short sequences as bf16 GEMMs through oneDNN's matmul.
//
// The flash-style kernel (attention.cpp) multiplies its tiles with dnnl_sgemm, so its bf16
// operands are widened and every product runs at the f32 rate. On a CPU with a native bf16
// matmul (AVX512-BF16, AMX) attention's products run at the bf16 rate only as bf16 GEMMs,
// which oneDNN offers only as matmul primitives, whose call cost wants whole matrices. So
// for sequences short enough that one head's scores fit in a few MiB (a DiT's 196 patches, a
// small GPT's 256 tokens), each task, one batch element and its heads (or one head, when the
// batch is too small to share out), runs a pass as a few GEMMs with its score matrix
// materialised between them, in the thread's cache:
//
//   forward:  S = Q K^T;  P = softmax(scale S + mask) (rows, f32; stored bf16);  O = P V
//   backward: S = Q K^T, dP = dO V^T;  P = exp(scale S + mask - lse);
//             dS = scale P (dP - Delta), Delta_i = rowsum(dO_i O_i);
//             dV = P^T dO,  dQ = dS K,  dK = dS^T Q
//
// The GEMMs accumulate in f32; P and dS are rounded to bf16 as GEMM operands (as GPU flash
// kernels do); the softmax statistics stay f32. Every output element belongs to one task and
// each task's GEMMs run sequentially on its thread (oneDNN inside our parallel region), so
// there are no atomics and the bits do not depend on the thread count (tested).
#include "loom/backend/cpu/attention_gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "loom/backend/cpu/gemm.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/scratch.h"
#include "loom/backend/cpu/vec_math.h"
#include "loom/core/dtype.h"

namespace loom::cpu {
namespace {

// Scores one task may hold: the backward keeps two f32 and two bf16 matrices of this many
// elements per thread (12 MiB). A head with more scores than this (sequences beyond about
// 1024 x 1024) goes to the flash kernel, whose memory does not grow with the sequence squared.
constexpr int64_t kMaxScores = int64_t(1) << 20;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::atomic<int> g_force_flash{0};

struct Geometry {
  int64_t batch, heads, seq_q, seq_kv, dim;
  AttentionBand band;
  int64_t task_heads;  // heads per task: all of them, or one when the batch is small
  Geometry(const Tensor& q, const Tensor& k, const AttentionBand& band)
      : batch(q.size(0)),
        heads(q.size(1)),
        seq_q(q.size(2)),
        seq_kv(k.size(2)),
        dim(q.size(3)),
        band(band) {
    const bool whole = heads * seq_q * seq_kv <= kMaxScores && batch >= 2 * omp_get_max_threads();
    task_heads = whole ? heads : 1;
  }
  int64_t tasks() const { return batch * (heads / task_heads); }
  int64_t task_scores() const { return task_heads * seq_q * seq_kv; }
  // The keys [first, end) that query i sees (first == end: none).
  struct Keys {
    int64_t first, end;
  };
  Keys visible(int64_t i) const {
    const int64_t first = band.first(i, seq_kv);
    return {first, std::max(first, band.end(i, seq_kv))};
  }
};

// Heads [h0, h0 + n) of batch element b of a (B, H, S, D) tensor, copied to or from a dense
// (n, S, D) buffer: oneDNN multiplies dense stacks faster than the strided rows of a fused qkv
// projection (DiT-small's attention in that layout: forward x1.23, backward x1.3 from the
// copies, which stay in the thread's cache).
struct HeadRows {
  char* base;
  int64_t n, S, D, stride_h, stride_s;
  HeadRows(const Tensor& t, int64_t b, int64_t h0, int64_t count)
      : base(static_cast<char*>(t.data_ptr()) +
             (b * t.stride(0) + h0 * t.stride(1)) * int64_t(dtype_size(t.dtype()))),
        n(count),
        S(t.size(2)),
        D(t.size(3)),
        stride_h(t.stride(1)),
        stride_s(t.stride(2)) {}
  char* row(int64_t h, int64_t s) const {
    return base + (h * stride_h + s * stride_s) * int64_t(sizeof(bf16));
  }
  // Rows of D bf16 values as 16-bit words: a loop the compiler vectorises, where memcpy's
  // call per short row cost more than the copy.
  void copy_to(bf16* dense) const {
    for (int64_t h = 0; h < n; ++h)
      for (int64_t s = 0; s < S; ++s) copy_row(row(h, s), dense + (h * S + s) * D);
  }
  void copy_from(const bf16* dense) const {
    for (int64_t h = 0; h < n; ++h)
      for (int64_t s = 0; s < S; ++s) copy_row(dense + (h * S + s) * D, row(h, s));
  }
  void copy_row(const void* from, void* to) const {
    const uint16_t* src = static_cast<const uint16_t*>(from);
    uint16_t* dst = static_cast<uint16_t*>(to);
    for (int64_t c = 0; c < D; ++c) dst[c] = src[c];
  }
};

// Per-thread buffers of bf16 elements (ScratchBuffer counts floats: two bf16 per float).
bf16* bf16_buffer(ScratchBuffer& b) {
  return reinterpret_cast<bf16*>(b.data());
}
ScratchBuffer bf16_scratch(int64_t count) {
  return ScratchBuffer(size_t((count + 1) / 2));
}

// A dense (n, M, N) stack of matrices (scores, or head rows copied out); transposed: seen as
// (n, N, M).
template <typename T>
MatrixView dense(T* data, int64_t n, int64_t M, int64_t N, bool transposed = false) {
  char* p = reinterpret_cast<char*>(data);
  const DType dtype = std::is_same_v<T, float> ? DType::F32 : DType::BF16;
  if (transposed) return {p, dtype, n, N, M, M * N, 1, N};
  return {p, dtype, n, M, N, M * N, N, 1};
}

// Readies the row's visible scores s[first, end) for the softmax and returns the factor its
// exponent still applies: with a mask they become scale * s + mask (factor 1); without one
// they stay as the GEMM wrote them and the scale (> 0) goes into the exponent,
// exp(fma(s, scale, -shift)), which saves a pass over the row.
float exponent_scores(const AttentionMask& mask, float scale, int64_t b, int64_t h, int64_t i,
                      Geometry::Keys keys, float* s) {
  if (mask.data == nullptr) return scale;
  const float* m = mask.data + b * mask.stride_b + h * mask.stride_h + i * mask.stride_i;
  const int64_t sj = mask.stride_j;
  for (int64_t j = keys.first; j < keys.end; ++j) s[j] = s[j] * scale + m[j * sj];
  return 1.0f;
}

// A row of Skv bf16 values: the visible ones [first, end) rounded from src, zeros elsewhere.
void store_row(const float* src, bf16* dst, Geometry::Keys keys, int64_t Skv) {
  std::fill(dst, dst + keys.first, bf16{});
  store_bf16(src + keys.first, dst + keys.first, keys.end - keys.first);
  std::fill(dst + keys.end, dst + Skv, bf16{});
}

}  // namespace

ForceFlashAttention::ForceFlashAttention() {
  ++g_force_flash;
}
ForceFlashAttention::~ForceFlashAttention() {
  --g_force_flash;
}

bool attention_gemm_applies(const Tensor& q, const Tensor& k) {
  if (g_force_flash.load() > 0 || q.dtype() != DType::BF16 || q.size(1) != k.size(1)) return false;
  return q.size(2) * k.size(2) <= kMaxScores && native_bf16_gemm();
}

void attention_gemm_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionMask& mask, float scale, const AttentionBand& band,
                            const Tensor& out, const Tensor& lse) {
  const Geometry g(q, k, band);
  const int64_t H = g.heads, Sq = g.seq_q, Skv = g.seq_kv, D = g.dim, n = g.task_heads;
  float* lse_all = lse.data<float>();
  struct Scratch {
    ScratchBuffer s, p, q, k, v, o;  // scores f32; probabilities and head rows bf16
  };
  const int64_t count = g.task_scores();
  run_tasks(
      g.tasks(),
      [&] {
        return Scratch{ScratchBuffer(size_t(count)), bf16_scratch(count),
                       bf16_scratch(n * Sq * D),     bf16_scratch(n * Skv * D),
                       bf16_scratch(n * Skv * D),    bf16_scratch(n * Sq * D)};
      },
      [&](Scratch& w, int64_t t) {
        const int64_t b = t / (H / n), h0 = t % (H / n) * n;
        float* s_all = w.s.data();
        bf16* p_all = bf16_buffer(w.p);
        bf16 *qd = bf16_buffer(w.q), *kd = bf16_buffer(w.k), *vd = bf16_buffer(w.v),
             *od = bf16_buffer(w.o);
        HeadRows(q, b, h0, n).copy_to(qd);
        HeadRows(k, b, h0, n).copy_to(kd);
        HeadRows(v, b, h0, n).copy_to(vd);
        gemm(dense(qd, n, Sq, D), dense(kd, n, Skv, D, true), dense(s_all, n, Sq, Skv));
        for (int64_t r = 0; r < n * Sq; ++r) {
          const int64_t h = h0 + r / Sq, i = r % Sq;
          float* s = s_all + r * Skv;
          bf16* p = p_all + r * Skv;
          const Geometry::Keys keys = g.visible(i);
          const float a = exponent_scores(mask, scale, b, h, i, keys, s);
          const float mx = a * lane_max(s + keys.first, keys.end - keys.first);
          float& row_lse = lse_all[(b * H + h) * Sq + i];
          if (mx == kNegInf) {  // no key visible: out 0, lse -inf, never NaN
            std::fill(p, p + Skv, bf16{});
            row_lse = kNegInf;
            continue;
          }
          float sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = keys.first; j < keys.end; ++j) {
            // A masked key (-inf) has probability 0 exactly, whatever fast_exp's floor.
            s[j] = s[j] == kNegInf ? 0.0f : fast_exp(std::fma(s[j], a, -mx));
            sum += s[j];
          }
          const float inv = 1.0f / sum;
#pragma omp simd
          for (int64_t j = keys.first; j < keys.end; ++j) s[j] *= inv;
          store_row(s, p, keys, Skv);
          row_lse = mx + std::log(sum);
        }
        gemm(dense(p_all, n, Sq, Skv), dense(vd, n, Skv, D), dense(od, n, Sq, D));
        HeadRows(out, b, h0, n).copy_from(od);
      });
}

void attention_gemm_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionMask& mask, float scale, const AttentionBand& band,
                             const Tensor& out, const Tensor& lse, const Tensor& gout,
                             const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  const Geometry g(q, k, band);
  const int64_t H = g.heads, Sq = g.seq_q, Skv = g.seq_kv, D = g.dim, n = g.task_heads;
  const float* lse_all = lse.data<float>();
  const bf16* o_base = out.data<bf16>();
  struct Scratch {
    ScratchBuffer s, dp, p, ds;             // scores and dP f32; P and dS bf16
    ScratchBuffer q, k, v, go, gq, gk, gv;  // head rows, bf16
  };
  const int64_t count = g.task_scores(), rows_q = n * Sq * D, rows_kv = n * Skv * D;
  run_tasks(
      g.tasks(),
      [&] {
        return Scratch{
            ScratchBuffer(size_t(count)), ScratchBuffer(size_t(count)), bf16_scratch(count),
            bf16_scratch(count),          bf16_scratch(rows_q),         bf16_scratch(rows_kv),
            bf16_scratch(rows_kv),        bf16_scratch(rows_q),         bf16_scratch(rows_q),
            bf16_scratch(rows_kv),        bf16_scratch(rows_kv)};
      },
      [&](Scratch& w, int64_t t) {
        const int64_t b = t / (H / n), h0 = t % (H / n) * n;
        float* s_all = w.s.data();
        float* dp_all = w.dp.data();
        bf16* p_all = bf16_buffer(w.p);
        bf16* ds_all = bf16_buffer(w.ds);
        bf16 *qd = bf16_buffer(w.q), *kd = bf16_buffer(w.k), *vd = bf16_buffer(w.v),
             *god = bf16_buffer(w.go);
        HeadRows(q, b, h0, n).copy_to(qd);
        HeadRows(k, b, h0, n).copy_to(kd);
        HeadRows(v, b, h0, n).copy_to(vd);
        HeadRows(gout, b, h0, n).copy_to(god);
        gemm(dense(qd, n, Sq, D), dense(kd, n, Skv, D, true), dense(s_all, n, Sq, Skv));
        gemm(dense(god, n, Sq, D), dense(vd, n, Skv, D, true), dense(dp_all, n, Sq, Skv));
        for (int64_t r = 0; r < n * Sq; ++r) {
          const int64_t h = h0 + r / Sq, i = r % Sq;
          float* s = s_all + r * Skv;
          float* dp = dp_all + r * Skv;
          bf16* p = p_all + r * Skv;
          bf16* ds = ds_all + r * Skv;
          const float row_lse = lse_all[(b * H + h) * Sq + i];
          const Geometry::Keys keys = row_lse == kNegInf ? Geometry::Keys{0, 0} : g.visible(i);
          // Delta from the bf16 output and its gradient, as the flash kernel takes it.
          const bf16* o = o_base + b * out.stride(0) + h * out.stride(1) + i * out.stride(2);
          const bf16* go = god + r * D;
          float delta = 0;
#pragma omp simd reduction(+ : delta)
          for (int64_t c = 0; c < D; ++c) delta += to_f32(o[c]) * to_f32(go[c]);
          const float a = exponent_scores(mask, scale, b, h, i, keys, s);
#pragma omp simd
          for (int64_t j = keys.first; j < keys.end; ++j) {  // P into s, dS into dp, both rounded
            // A masked key (-inf) has probability 0 exactly, whatever fast_exp's floor.
            const float pj = s[j] == kNegInf ? 0.0f : fast_exp(std::fma(s[j], a, -row_lse));
            s[j] = pj;
            dp[j] = scale * pj * (dp[j] - delta);
          }
          store_row(s, p, keys, Skv);
          store_row(dp, ds, keys, Skv);
        }
        bf16 *gqd = bf16_buffer(w.gq), *gkd = bf16_buffer(w.gk), *gvd = bf16_buffer(w.gv);
        gemm(dense(p_all, n, Sq, Skv, true), dense(god, n, Sq, D), dense(gvd, n, Skv, D));
        gemm(dense(ds_all, n, Sq, Skv), dense(kd, n, Skv, D), dense(gqd, n, Sq, D));
        gemm(dense(ds_all, n, Sq, Skv, true), dense(qd, n, Sq, D), dense(gkd, n, Skv, D));
        HeadRows(gq, b, h0, n).copy_from(gqd);
        HeadRows(gk, b, h0, n).copy_from(gkd);
        HeadRows(gv, b, h0, n).copy_from(gvd);
      });
}

}  // namespace loom::cpu
