// Fused scaled-dot-product attention for the CPU, flash-style (FlashAttention-2 schedule).
//
// Forward: each (batch, head, query block) task walks the key blocks once, keeping a running
// row max m and row sum l of the softmax (online softmax) and rescaling its output accumulator
// when the max grows, so only a (block_q x block_k) score tile ever exists. It saves
// lse = m + log(l) per query row for the backward.
//
// Backward: recomputes each score tile from q, k and lse (P = exp(S - lse)), with
// Delta_i = rowsum(dO_i * O_i):
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  dQ += dS K * scale,  dK += dS^T Q * scale.
// One task per (batch, kv head) walks every query head of its GQA group, so the dK/dV rows it
// accumulates belong to it alone: no atomics, no per-thread copies of dK/dV.
//
// q, k, v, out and the gradients are (B, H, S, D) with any strides except that each row of D
// values is contiguous: a (B, S, H, D) buffer seen through a permutation, or the q/k/v slices
// of one fused projection output, are read and written in place (tile GEMMs take row strides).
//
// Tile products go through oneDNN's dnnl_sgemm; inside our OpenMP region it runs on the calling
// thread. bf16/f16 tiles are widened to f32 on the way in and rounded once on the way out.
// So bf16 problems with short sequences go to attention_gemm.cpp instead where the CPU has a
// native bf16 matmul: batched bf16 GEMMs over a materialised score matrix.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "loom/backend/cpu/attention_gemm.h"
#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/dtype_dispatch.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/scratch.h"
#include "loom/backend/cpu/vec_math.h"
#include "loom/backend/kernel_checks.h"

namespace loom {
namespace {

// 64 queries x 128 keys: a score tile (32 KiB) plus the q/k/v tiles for D = 64 stay in L2, and
// the diagonal tiles of a causal pass waste at most half a tile of work per query block.
constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 128;
// A short sequence without a causal mask (at most 256 keys: a DiT's 196 patches) is one tile of
// all its keys by up to 256 queries (at most 256 KiB per score tile): fewer and larger tile
// products, and one online-softmax step per row. DiT-small's attention (64 x 4 heads of 196 tokens,
// D = 64), forward and backward, alternately in one process: x1.13-1.27 over six pairs; the
// DiT-small training step x1.017 (median of 4 alternating rounds, none below 1).
constexpr int64_t kWholeTile = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Dims {
  int64_t batch, heads_q, heads_kv, group, seq_q, seq_kv, head_dim;
  AttentionBand band;        // the keys [first(i), end(i)) query i sees
  int64_t block_q, block_k;  // tile: queries x keys
};

void choose_tiles(Dims& d) {
  const bool whole = !d.band.causal && d.seq_kv <= kWholeTile;
  d.block_q = whole ? std::clamp<int64_t>(d.seq_q, 1, kWholeTile) : kBlockQ;
  d.block_k = whole ? std::max<int64_t>(d.seq_kv, 1) : kBlockK;
}

using MaskView = cpu::AttentionMask;

void gemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t status =
      dnnl_sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  LOOM_CHECK(status == dnnl_success) << "attention: dnnl_sgemm failed with status " << status;
}

// A (B, H, S, D) operand whose rows of D values are contiguous.
template <typename T>
struct Heads {
  T* data;
  int64_t sb, sh, ss;  // strides of batch, head and sequence position (elements)
  T* row(int64_t b, int64_t h, int64_t s) const { return data + b * sb + h * sh + s * ss; }
};

// A single position may carry any stride; the tile GEMMs still need a row stride >= D.
template <typename T>
Heads<T> heads_of(const Tensor& t) {
  const int64_t ss = t.size(2) == 1 ? t.size(3) : t.stride(2);
  return {static_cast<T*>(t.data_ptr()), t.stride(0), t.stride(1), ss};
}

// f32 rows: a pointer and its row stride.
struct Rows {
  const float* data;
  int64_t ld;
};

// m rows of `dim` values at src (row stride ld) as f32: src itself for f32 tensors (no copy),
// else the widened values written densely into buf.
template <typename T>
Rows as_f32(const T* src, int64_t m, int64_t dim, int64_t ld, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return {src, ld};
  } else {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < dim; ++c) buf[i * dim + c] = to_f32(src[i * ld + c]);
    return {buf, dim};
  }
}

// Dense f32 rows (m x dim) stored into rows of stride ld.
template <typename T>
void store(const float* src, int64_t m, int64_t dim, T* dst, int64_t ld) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < dim; ++c) dst[i * ld + c] = from_f32<T>(src[i * dim + c]);
}

// The keys [begin, end) that some query of the block [i0, i0 + m) sees (the band's bounds
// grow with the query).
struct KeySpan {
  int64_t begin, end;
};
KeySpan key_span(const Dims& d, int64_t i0, int64_t m) {
  return {d.band.first(i0, d.seq_kv), d.band.end(i0 + m - 1, d.seq_kv)};
}

// s (m, n; row stride ld) = scale * q_tile k_tile^T + mask, -inf outside the band.
void score_tile(const Dims& d, const MaskView& mask, float scale, int64_t b, int64_t h, int64_t i0,
                int64_t m, int64_t j0, int64_t n, Rows q_tile, Rows k_tile, float* s, int64_t ld) {
  gemm('N', 'T', m, n, d.head_dim, scale, q_tile.data, q_tile.ld, k_tile.data, k_tile.ld, 0.0f, s,
       ld);
  if (mask.data != nullptr) {
    const float* base = mask.data + b * mask.stride_b + h * mask.stride_h;
    const int64_t sj = mask.stride_j;
    for (int64_t i = 0; i < m; ++i) {
      const float* mrow = base + (i0 + i) * mask.stride_i + j0 * sj;
      float* row = s + i * ld;
      if (sj == 1) {
        for (int64_t j = 0; j < n; ++j) row[j] += mrow[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += mrow[j * sj];
      }
    }
  }
  // Only the tiles that straddle an edge of the band need masking: the others are fully
  // visible (and the ones wholly outside it were never computed).
  const AttentionBand& band = d.band;
  if (band.end(i0, d.seq_kv) < j0 + n || band.first(i0 + m - 1, d.seq_kv) > j0) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t lo = std::clamp<int64_t>(band.first(i0 + i, d.seq_kv) - j0, 0, n);
      const int64_t hi = std::clamp<int64_t>(band.end(i0 + i, d.seq_kv) - j0, lo, n);
      float* row = s + i * ld;
      std::fill(row, row + lo, kNegInf);
      std::fill(row + hi, row + n, kNegInf);
    }
  }
}

// row[j] = exp(row[j] - shift); returns the sum. shift must be finite.
float exp_shifted(float* row, int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float p = cpu::fast_exp(row[j] - shift);
    row[j] = p;
    sum += p;
  }
  return sum;
}

// Per-thread scratch, allocated once per thread and call: O(tile sizes x D).
struct ForwardScratch {
  cpu::ScratchBuffer s, acc, row_m, row_l, q, k, v;
  explicit ForwardScratch(const Dims& d)
      : s(d.block_q * d.block_k),
        acc(d.block_q * d.head_dim),
        row_m(d.block_q),
        row_l(d.block_q),
        q(d.block_q * d.head_dim),
        k(d.block_k * d.head_dim),
        v(d.block_k * d.head_dim) {}
};

template <typename T>
void forward_block(const Dims& d, const MaskView& mask, float scale, const Heads<const T>& q,
                   const Heads<const T>& k, const Heads<const T>& v, const Heads<T>& out,
                   float* lse, int64_t b, int64_t h, int64_t qb, ForwardScratch& w) {
  const int64_t dim = d.head_dim;
  const int64_t i0 = qb * d.block_q, m = std::min(d.block_q, d.seq_q - i0);
  const int64_t hkv = h / d.group;
  const Rows q_tile = as_f32(q.row(b, h, i0), m, dim, q.ss, w.q.data());
  float* s = w.s.data();
  float* acc = w.acc.data();
  float* row_m = w.row_m.data();
  float* row_l = w.row_l.data();
  std::fill_n(acc, m * dim, 0.0f);
  std::fill_n(row_m, m, kNegInf);
  std::fill_n(row_l, m, 0.0f);

  const KeySpan keys = key_span(d, i0, m);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += d.block_k) {
    const int64_t n = std::min(d.block_k, keys.end - j0);
    const Rows k_tile = as_f32(k.row(b, hkv, j0), n, dim, k.ss, w.k.data());
    const Rows v_tile = as_f32(v.row(b, hkv, j0), n, dim, v.ss, w.v.data());
    score_tile(d, mask, scale, b, h, i0, m, j0, n, q_tile, k_tile, s, d.block_k);
    for (int64_t i = 0; i < m; ++i) {
      float* row = s + i * d.block_k;
      const float m_new = std::max(row_m[i], cpu::lane_max(row, n));
      if (m_new == kNegInf) {
        // Every key so far is masked for this row: contribute nothing (and avoid -inf - -inf).
        std::fill_n(row, n, 0.0f);
        continue;
      }
      // exp(-inf - finite) = 0 wipes the (empty) accumulator on a row's first visible key.
      const float correction = cpu::fast_exp(row_m[i] - m_new);
      row_l[i] = row_l[i] * correction + exp_shifted(row, n, m_new);
      row_m[i] = m_new;
      if (correction != 1.0f) {
        float* acc_row = acc + i * dim;
        for (int64_t c = 0; c < dim; ++c) acc_row[c] *= correction;
      }
    }
    gemm('N', 'N', m, dim, n, 1.0f, s, d.block_k, v_tile.data, v_tile.ld, 1.0f, acc, dim);
  }

  // Fully masked rows (l == 0) produce out = 0 and lse = -inf, never NaN.
  float* lse_rows = lse + (b * d.heads_q + h) * d.seq_q + i0;
  for (int64_t i = 0; i < m; ++i) {
    const float inv = row_l[i] > 0.0f ? 1.0f / row_l[i] : 0.0f;
    float* acc_row = acc + i * dim;
    for (int64_t c = 0; c < dim; ++c) acc_row[c] *= inv;
    lse_rows[i] = row_l[i] > 0.0f ? row_m[i] + std::log(row_l[i]) : kNegInf;
  }
  store(acc, m, dim, out.row(b, h, i0), out.ss);
}

struct BackwardScratch {
  // Tiles: scores/probabilities, dP/dS, dQ accumulator, q and dO widened; Delta per query.
  cpu::ScratchBuffer p, ds, dq, q, dout, delta;
  // Whole-head f32 copies of K and V and dK/dV accumulators: only for 16-bit dtypes
  // (f32 tensors are read and accumulated in place). O(Skv x D): linear in the sequence.
  cpu::ScratchBuffer k, v, dk, dv;
  BackwardScratch(const Dims& d, bool widen)
      : p(d.block_q * d.block_k),
        ds(d.block_q * d.block_k),
        dq(d.block_q * d.head_dim),
        q(d.block_q * d.head_dim),
        dout(d.block_q * d.head_dim),
        delta(d.block_q) {
    if (widen) {
      k.resize(d.seq_kv * d.head_dim);
      v.resize(d.seq_kv * d.head_dim);
      dk.resize(d.seq_kv * d.head_dim);
      dv.resize(d.seq_kv * d.head_dim);
    }
  }
};

template <typename T>
void backward_head_group(const Dims& d, const MaskView& mask, float scale, const Heads<const T>& q,
                         const Heads<const T>& k, const Heads<const T>& v,
                         const Heads<const T>& out, const float* lse, const Heads<const T>& gout,
                         const Heads<T>& gq, const Heads<T>& gk, const Heads<T>& gv, int64_t b,
                         int64_t kvh, BackwardScratch& w) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  const int64_t dim = d.head_dim;
  const Rows k_head = as_f32(k.row(b, kvh, 0), d.seq_kv, dim, k.ss, w.k.data());
  const Rows v_head = as_f32(v.row(b, kvh, 0), d.seq_kv, dim, v.ss, w.v.data());
  // dK/dV accumulate in place for f32, in dense f32 scratch otherwise.
  float* dk_head;
  float* dv_head;
  int64_t dk_ld = dim, dv_ld = dim;
  if constexpr (kF32) {
    dk_head = gk.row(b, kvh, 0);
    dv_head = gv.row(b, kvh, 0);
    dk_ld = gk.ss;
    dv_ld = gv.ss;
  } else {
    dk_head = w.dk.data();
    dv_head = w.dv.data();
  }
  for (int64_t j = 0; j < d.seq_kv; ++j) {
    std::fill_n(dk_head + j * dk_ld, dim, 0.0f);
    std::fill_n(dv_head + j * dv_ld, dim, 0.0f);
  }

  float* p = w.p.data();
  float* ds = w.ds.data();
  float* dq = w.dq.data();
  float* delta = w.delta.data();
  for (int64_t g = 0; g < d.group; ++g) {
    const int64_t h = kvh * d.group + g;
    for (int64_t i0 = 0; i0 < d.seq_q; i0 += d.block_q) {
      const int64_t m = std::min(d.block_q, d.seq_q - i0);
      const Rows q_tile = as_f32(q.row(b, h, i0), m, dim, q.ss, w.q.data());
      const Rows dout_tile = as_f32(gout.row(b, h, i0), m, dim, gout.ss, w.dout.data());
      const float* lse_rows = lse + (b * d.heads_q + h) * d.seq_q + i0;
      for (int64_t i = 0; i < m; ++i) {
        const T* o_row = out.row(b, h, i0 + i);
        const float* g_row = dout_tile.data + i * dout_tile.ld;
        float sum = 0.0f;
        for (int64_t c = 0; c < dim; ++c) sum += to_f32(o_row[c]) * g_row[c];
        delta[i] = sum;
      }
      std::fill_n(dq, m * dim, 0.0f);

      const KeySpan keys = key_span(d, i0, m);
      for (int64_t j0 = keys.begin; j0 < keys.end; j0 += d.block_k) {
        const int64_t n = std::min(d.block_k, keys.end - j0);
        const Rows k_tile{k_head.data + j0 * k_head.ld, k_head.ld};
        const Rows v_tile{v_head.data + j0 * v_head.ld, v_head.ld};
        score_tile(d, mask, scale, b, h, i0, m, j0, n, q_tile, k_tile, p, d.block_k);
        for (int64_t i = 0; i < m; ++i) {
          float* row = p + i * d.block_k;
          // lse = -inf marks a fully masked row: its probabilities (and gradients) are 0.
          if (lse_rows[i] == kNegInf) {
            std::fill_n(row, n, 0.0f);
          } else {
            exp_shifted(row, n, lse_rows[i]);
          }
        }
        // dV[j0:j0+n] += P^T dO
        gemm('T', 'N', n, dim, m, 1.0f, p, d.block_k, dout_tile.data, dout_tile.ld, 1.0f,
             dv_head + j0 * dv_ld, dv_ld);
        // dP = dO V^T, then dS = P * (dP - Delta) in place.
        gemm('N', 'T', m, n, dim, 1.0f, dout_tile.data, dout_tile.ld, v_tile.data, v_tile.ld, 0.0f,
             ds, d.block_k);
        for (int64_t i = 0; i < m; ++i) {
          const float* p_row = p + i * d.block_k;
          float* ds_row = ds + i * d.block_k;
          const float delta_i = delta[i];
          for (int64_t j = 0; j < n; ++j) ds_row[j] = p_row[j] * (ds_row[j] - delta_i);
        }
        // dQ += scale * dS K ;  dK[j0:j0+n] += scale * dS^T Q
        gemm('N', 'N', m, dim, n, scale, ds, d.block_k, k_tile.data, k_tile.ld, 1.0f, dq, dim);
        gemm('T', 'N', n, dim, m, scale, ds, d.block_k, q_tile.data, q_tile.ld, 1.0f,
             dk_head + j0 * dk_ld, dk_ld);
      }
      store(dq, m, dim, gq.row(b, h, i0), gq.ss);
    }
  }
  if constexpr (!kF32) {
    store(dk_head, d.seq_kv, dim, gk.row(b, kvh, 0), gk.ss);
    store(dv_head, d.seq_kv, dim, gv.row(b, kvh, 0), gv.ss);
  }
}

// Validates q/k/v/mask/out/lse and returns the problem dims.
Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                  const AttentionBand& band, const Tensor& out, const Tensor& lse,
                  MaskView& mask_view) {
  LOOM_CHECK(q.defined() && k.defined() && v.defined()) << "attention: q, k and v are required";
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
      << "attention: q, k, v must be 4-D (B, H, S, D); got q " << shape_str(q.shape()) << ", k "
      << shape_str(k.shape()) << ", v " << shape_str(v.shape());
  const DType dtype = q.dtype();
  LOOM_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16)
      << "attention: unsupported dtype " << dtype_name(dtype) << " (expected f32, bf16 or f16)";
  Dims d{};
  d.batch = q.size(0);
  d.heads_q = q.size(1);
  d.seq_q = q.size(2);
  d.head_dim = q.size(3);
  d.heads_kv = k.size(1);
  d.seq_kv = k.size(2);
  LOOM_CHECK(k.size(0) == d.batch && k.size(3) == d.head_dim)
      << "attention: k " << shape_str(k.shape()) << " does not match q " << shape_str(q.shape())
      << " in batch or head dim";
  LOOM_CHECK(d.heads_kv > 0 && d.heads_q % d.heads_kv == 0)
      << "attention: q heads (" << d.heads_q << ") must be a multiple of k/v heads (" << d.heads_kv
      << "); q " << shape_str(q.shape()) << ", k " << shape_str(k.shape());
  d.group = d.heads_q / d.heads_kv;
  LOOM_CHECK(band.window >= 0) << "attention: window " << band.window << " is negative";
  d.band = band;
  check_attention_rows(q, "q", q.shape(), dtype);
  check_attention_rows(k, "k", k.shape(), dtype);
  check_attention_rows(v, "v", k.shape(), dtype);
  check_attention_rows(out, "out", q.shape(), dtype);
  LOOM_CHECK(lse.defined() && lse.shape() == Shape({d.batch, d.heads_q, d.seq_q}) &&
             lse.dtype() == DType::F32 && lse.is_contiguous())
      << "attention: lse must be contiguous f32 (" << d.batch << ", " << d.heads_q << ", "
      << d.seq_q << ")";

  mask_view = MaskView{};
  if (mask.defined()) {
    LOOM_CHECK(mask.dtype() == DType::F32)
        << "attention: mask must be f32, got " << dtype_name(mask.dtype());
    LOOM_CHECK(mask.dim() == 4)
        << "attention: mask must be 4-D, broadcastable to (B, Hq, Sq, Skv); got "
        << shape_str(mask.shape());
    const Shape full{d.batch, d.heads_q, d.seq_q, d.seq_kv};
    int64_t strides[4];
    for (int i = 0; i < 4; ++i) {
      LOOM_CHECK(mask.size(i) == full[i] || mask.size(i) == 1)
          << "attention: mask " << shape_str(mask.shape()) << " does not broadcast to "
          << shape_str(full);
      // A size-1 dim broadcasts whatever stride it carries.
      strides[i] = mask.size(i) == 1 ? 0 : mask.stride(i);
    }
    mask_view = MaskView{static_cast<const float*>(mask.data_ptr()), strides[0], strides[1],
                         strides[2], strides[3]};
  }
  return d;
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& mask, float scale, const AttentionBand& band,
                                   const Tensor& out, const Tensor& lse) {
  MaskView mask_view;
  Dims d = check_inputs(q, k, v, mask, band, out, lse, mask_view);
  if (cpu::attention_gemm_applies(q, k))
    return cpu::attention_gemm_forward(q, k, v, mask_view, scale, band, out, lse);
  choose_tiles(d);
  const int64_t q_blocks = (d.seq_q + d.block_q - 1) / d.block_q;
  const int64_t tasks = d.batch * d.heads_q * q_blocks;
  cpu::dispatch_float(q.dtype(), "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    const auto qh = heads_of<const T>(q), kh = heads_of<const T>(k), vh = heads_of<const T>(v);
    const auto outh = heads_of<T>(out);
    float* lsep = lse.data<float>();
    cpu::run_tasks(
        tasks, [&] { return ForwardScratch(d); },
        [&](ForwardScratch& scratch, int64_t t) {
          const int64_t qb = t % q_blocks, bh = t / q_blocks;
          forward_block<T>(d, mask_view, scale, qh, kh, vh, outh, lsep, bh / d.heads_q,
                           bh % d.heads_q, qb, scratch);
        });
  });
}

void CpuBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, float scale, const AttentionBand& band,
                                    const Tensor& out, const Tensor& lse, const Tensor& gout,
                                    const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  MaskView mask_view;
  Dims d = check_inputs(q, k, v, mask, band, out, lse, mask_view);
  choose_tiles(d);
  check_attention_rows(gout, "gout", q.shape(), q.dtype());
  check_attention_rows(gq, "gq", q.shape(), q.dtype());
  check_attention_rows(gk, "gk", k.shape(), q.dtype());
  check_attention_rows(gv, "gv", k.shape(), q.dtype());
  if (cpu::attention_gemm_applies(q, k))
    return cpu::attention_gemm_backward(q, k, v, mask_view, scale, band, out, lse, gout, gq, gk,
                                        gv);
  const int64_t tasks = d.batch * d.heads_kv;
  cpu::dispatch_float(q.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto qh = heads_of<const T>(q), kh = heads_of<const T>(k), vh = heads_of<const T>(v);
    const auto outh = heads_of<const T>(out), gouth = heads_of<const T>(gout);
    const auto gqh = heads_of<T>(gq), gkh = heads_of<T>(gk), gvh = heads_of<T>(gv);
    const float* lsep = lse.data<float>();
    cpu::run_tasks(
        tasks, [&] { return BackwardScratch(d, !std::is_same_v<T, float>); },
        [&](BackwardScratch& scratch, int64_t t) {
          backward_head_group<T>(d, mask_view, scale, qh, kh, vh, outh, lsep, gouth, gqh, gkh, gvh,
                                 t / d.heads_kv, t % d.heads_kv, scratch);
        });
  });
}

}  // namespace loom
