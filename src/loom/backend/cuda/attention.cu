// Scaled-dot-product attention, forward and backward, without an S x S matrix. What cuDNN's
// fused attention takes (bf16/f16 without a mask: cudnn_attention.h) runs there, on tensor
// cores. Everything else runs on simple CUDA-core kernels, written to be right first: one
// thread per query row keeps an online softmax (forward, and dq in the backward), one thread
// per key row sums dk and dv over its query heads and rows in order (deterministic, no atomics).
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/kernel_checks.h"
#ifndef LOOM_CUDA_EMULATE
#include "loom/backend/cuda/cudnn_attention.h"
#endif

namespace loom::LOOM_CUDA_NS {

namespace {

constexpr int64_t kMaxHeadDim = 256;

// A (B, H, S, D) operand whose rows of D values are contiguous.
template <typename T>
struct Heads {
  T* data;
  int64_t sb, sh, ss;
  LOOM_HD T* row(int64_t b, int64_t h, int64_t s) const { return data + b * sb + h * sh + s * ss; }
};
template <typename T>
Heads<T> heads(const Tensor& t) {
  return Heads<T>{static_cast<T*>(t.raw_ptr()), t.stride(0), t.stride(1), t.stride(2)};
}

struct Problem {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, dim, group;
  float scale;
  AttentionBand band;
  const float* mask;  // additive, broadcast through strides (0 = broadcast); nullptr if none
  int64_t mb, mh, mi, mj;
  // The score's additive part for (b, h, i, j): the mask, or -inf outside the band.
  LOOM_HD float bias(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!band.sees(i, j, seq_kv)) return -INFINITY;
    return mask ? mask[b * mb + h * mh + i * mi + j * mj] : 0.0f;
  }
};

template <typename T>
LOOM_HD inline float dot(const T* a, const T* b, int64_t n) {
  float s = 0.0f;
  for (int64_t d = 0; d < n; ++d) s += to_f32(a[d]) * to_f32(b[d]);
  return s;
}

template <typename T>
__global__ void attention_forward_kernel(Problem p, Heads<const T> q, Heads<const T> k,
                                         Heads<const T> v, Heads<T> out, float* lse) {
  LOOM_GRID_STRIDE(row, p.batch * p.heads_q * p.seq_q) {
    const int64_t i = row % p.seq_q, h = (row / p.seq_q) % p.heads_q,
                  b = row / (p.seq_q * p.heads_q);
    const int64_t kvh = h / p.group;
    const T* qr = q.row(b, h, i);
    float acc[kMaxHeadDim];
    for (int64_t d = 0; d < p.dim; ++d) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = p.band.first(i, p.seq_kv); j < p.band.end(i, p.seq_kv); ++j) {
      const float extra = p.bias(b, h, i, j);
      if (extra == -INFINITY) continue;
      const float s = p.scale * dot(qr, k.row(b, kvh, j), p.dim) + extra;
      if (s > m) {  // rescale what was accumulated under the old maximum
        const float c = m == -INFINITY ? 0.0f : expf(m - s);
        l *= c;
        for (int64_t d = 0; d < p.dim; ++d) acc[d] *= c;
        m = s;
      }
      const float e = expf(s - m);
      l += e;
      const T* vr = v.row(b, kvh, j);
      for (int64_t d = 0; d < p.dim; ++d) acc[d] += e * to_f32(vr[d]);
    }
    // Fully masked rows give out = 0 and lse = -inf, never NaN (as on the CPU).
    T* o = out.row(b, h, i);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < p.dim; ++d) o[d] = from_f32<T>(acc[d] * inv);
    lse[row] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

// delta = rowsum(gout * out), then dq = scale sum_j p_ij (gout_i . v_j - delta_i) k_j.
template <typename T>
__global__ void attention_dq_kernel(Problem p, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                    Heads<const T> out, const float* lse, Heads<const T> gout,
                                    Heads<T> gq, float* delta) {
  LOOM_GRID_STRIDE(row, p.batch * p.heads_q * p.seq_q) {
    const int64_t i = row % p.seq_q, h = (row / p.seq_q) % p.heads_q,
                  b = row / (p.seq_q * p.heads_q);
    const int64_t kvh = h / p.group;
    const T* qr = q.row(b, h, i);
    const T* go = gout.row(b, h, i);
    const float dl = dot(go, out.row(b, h, i), p.dim);
    delta[row] = dl;
    float acc[kMaxHeadDim];
    for (int64_t d = 0; d < p.dim; ++d) acc[d] = 0.0f;
    const float l = lse[row];
    if (l != -INFINITY) {
      for (int64_t j = p.band.first(i, p.seq_kv); j < p.band.end(i, p.seq_kv); ++j) {
        const float extra = p.bias(b, h, i, j);
        if (extra == -INFINITY) continue;
        const T* kr = k.row(b, kvh, j);
        const float pr = expf(p.scale * dot(qr, kr, p.dim) + extra - l);
        const float ds = pr * (dot(go, v.row(b, kvh, j), p.dim) - dl);
        for (int64_t d = 0; d < p.dim; ++d) acc[d] += ds * to_f32(kr[d]);
      }
    }
    T* g = gq.row(b, h, i);
    for (int64_t d = 0; d < p.dim; ++d) g[d] = from_f32<T>(p.scale * acc[d]);
  }
}

// dk_j = scale sum_{h in group, i} ds_ij q_i and dv_j = sum p_ij gout_i.
template <typename T>
__global__ void attention_dkv_kernel(Problem p, Heads<const T> q, Heads<const T> k,
                                     Heads<const T> v, const float* lse, const float* delta,
                                     Heads<const T> gout, Heads<T> gk, Heads<T> gv) {
  LOOM_GRID_STRIDE(row, p.batch * p.heads_kv * p.seq_kv) {
    const int64_t j = row % p.seq_kv, kvh = (row / p.seq_kv) % p.heads_kv;
    const int64_t b = row / (p.seq_kv * p.heads_kv);
    const T* kr = k.row(b, kvh, j);
    const T* vr = v.row(b, kvh, j);
    float dk[kMaxHeadDim], dv[kMaxHeadDim];
    for (int64_t d = 0; d < p.dim; ++d) dk[d] = dv[d] = 0.0f;
    for (int64_t h = kvh * p.group; h < (kvh + 1) * p.group; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        const int64_t qrow = (b * p.heads_q + h) * p.seq_q + i;
        const float l = lse[qrow];
        const float extra = p.bias(b, h, i, j);
        if (l == -INFINITY || extra == -INFINITY) continue;
        const T* qr = q.row(b, h, i);
        const T* go = gout.row(b, h, i);
        const float pr = expf(p.scale * dot(qr, kr, p.dim) + extra - l);
        const float ds = pr * (dot(go, vr, p.dim) - delta[qrow]);
        for (int64_t d = 0; d < p.dim; ++d) {
          dk[d] += ds * to_f32(qr[d]);
          dv[d] += pr * to_f32(go[d]);
        }
      }
    T* gkr = gk.row(b, kvh, j);
    T* gvr = gv.row(b, kvh, j);
    for (int64_t d = 0; d < p.dim; ++d) {
      gkr[d] = from_f32<T>(p.scale * dk[d]);
      gvr[d] = from_f32<T>(dv[d]);
    }
  }
}

Problem problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, float scale,
                const AttentionBand& band, const Tensor& out, const Tensor& lse) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
      << "attention: q, k, v must be 4-D (B, H, S, D)";
  Problem p{};
  p.batch = q.size(0);
  p.heads_q = q.size(1);
  p.seq_q = q.size(2);
  p.dim = q.size(3);
  p.heads_kv = k.size(1);
  p.seq_kv = k.size(2);
  LOOM_CHECK(k.size(0) == p.batch && k.size(3) == p.dim && p.heads_kv > 0 &&
             p.heads_q % p.heads_kv == 0)
      << "attention: k " << shape_str(k.shape()) << " does not fit q " << shape_str(q.shape());
  LOOM_CHECK(p.dim <= kMaxHeadDim)
      << "attention: the CUDA kernels take head dims up to " << kMaxHeadDim << ", got " << p.dim;
  p.group = p.heads_q / p.heads_kv;
  p.scale = scale;
  LOOM_CHECK(band.window >= 0) << "attention: window " << band.window << " is negative";
  p.band = band;
  check_attention_rows(q, "q", q.shape(), q.dtype());
  check_attention_rows(k, "k", k.shape(), q.dtype());
  check_attention_rows(v, "v", k.shape(), q.dtype());
  check_attention_rows(out, "out", q.shape(), q.dtype());
  LOOM_CHECK(lse.shape() == Shape({p.batch, p.heads_q, p.seq_q}) && lse.dtype() == DType::F32 &&
             lse.is_contiguous())
      << "attention: lse must be contiguous f32 (B, Hq, Sq)";
  if (mask.defined()) {
    LOOM_CHECK(mask.dtype() == DType::F32 && mask.dim() == 4)
        << "attention: mask must be 4-D f32, broadcastable to (B, Hq, Sq, Skv)";
    const Shape full{p.batch, p.heads_q, p.seq_q, p.seq_kv};
    int64_t s[4];
    for (int d = 0; d < 4; ++d) {
      LOOM_CHECK(mask.size(d) == full[size_t(d)] || mask.size(d) == 1)
          << "attention: mask " << shape_str(mask.shape()) << " does not broadcast to "
          << shape_str(full);
      s[d] = mask.size(d) == 1 ? 0 : mask.stride(d);
    }
    p.mask = static_cast<const float*>(mask.raw_ptr());
    p.mb = s[0], p.mh = s[1], p.mi = s[2], p.mj = s[3];
  }
  return p;
}

unsigned row_blocks(int64_t rows) {
  return blocks_for(rows, 128);
}

}  // namespace

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, float scale, const AttentionBand& band,
                                    const Tensor& out, const Tensor& lse) {
  const Problem p = problem(q, k, v, mask, scale, band, out, lse);
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  if (rows == 0) return;
#ifndef LOOM_CUDA_EMULATE
  // cuDNN takes the plain causal mask; a window or a ring block's offset runs below.
  if (!p.mask && p.seq_kv > 0 && band.plain(p.seq_q, p.seq_kv) &&
      cudnn_attention_forward(q, k, v, scale, band.causal, out, lse))
    return;
#endif
  dispatch_float(q.dtype(), "attention", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(attention_forward_kernel<T>, row_blocks(rows), 128, p, heads<const T>(q),
                heads<const T>(k), heads<const T>(v), heads<T>(out), ptr<float>(lse));
  });
}

void CudaBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& mask, float scale, const AttentionBand& band,
                                     const Tensor& out, const Tensor& lse, const Tensor& gout,
                                     const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  const Problem p = problem(q, k, v, mask, scale, band, out, lse);
  check_attention_rows(gout, "gout", q.shape(), q.dtype());
  check_attention_rows(gq, "gq", q.shape(), q.dtype());
  check_attention_rows(gk, "gk", k.shape(), q.dtype());
  check_attention_rows(gv, "gv", k.shape(), q.dtype());
  const int64_t q_rows = p.batch * p.heads_q * p.seq_q, kv_rows = p.batch * p.heads_kv * p.seq_kv;
  if (q_rows == 0 || kv_rows == 0) return;
#ifndef LOOM_CUDA_EMULATE
  if (!p.mask && band.plain(p.seq_q, p.seq_kv) &&
      cudnn_attention_backward(q, k, v, scale, band.causal, out, lse, gout, gq, gk, gv))
    return;
#endif
  // delta as f32 in an f64-sized scratch (twice the elements it needs).
  Tensor delta_storage = scratch_f64((q_rows + 1) / 2, q.device());
  float* delta = static_cast<float*>(delta_storage.raw_ptr());
  dispatch_float(q.dtype(), "attention_backward", [&](auto z) {
    using T = decltype(z);
    LOOM_LAUNCH(attention_dq_kernel<T>, row_blocks(q_rows), 128, p, heads<const T>(q),
                heads<const T>(k), heads<const T>(v), heads<const T>(out), ptr<const float>(lse),
                heads<const T>(gout), heads<T>(gq), delta);
    LOOM_LAUNCH(attention_dkv_kernel<T>, row_blocks(kv_rows), 128, p, heads<const T>(q),
                heads<const T>(k), heads<const T>(v), ptr<const float>(lse), delta,
                heads<const T>(gout), heads<T>(gk), heads<T>(gv));
  });
}

}  // namespace loom::LOOM_CUDA_NS
