// Kernel-level tests of the CPU attention kernels against an independent float64 reference
// that materialises the whole score matrix: the flash-style kernel (backend/cpu/attention.cpp)
// and, for bf16 where the CPU has a native bf16 matmul, the batched-GEMM kernel
// (attention_gemm.cpp); every bf16 case runs through both. The reference backward is itself
// checked against central finite differences of the reference forward.
//
// Tolerances, as max |kernel - reference| / max |reference| over a whole tensor:
//   f32 kernel: 1e-4 (f32 accumulation over <= 257 keys and fast_exp's ~2 ulp);
//   bf16 kernel: 3e-2 (outputs rounded to bf16, 2^-9 relative, and the bf16-rounded O that
//   enters Delta = rowsum(dO * O) in the backward: measured up to 1.4e-2 on dK at D = 8; the
//   GEMM kernel also rounds P and dS to bf16 as GEMM operands);
//   f16 shares the bf16 bound (measured 5e-4).
// Inputs of a bf16 case are rounded to bf16 first, so the reference sees exactly the values
// the kernel sees and only the kernel's own rounding is measured.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/backend/cpu/attention_gemm.h"
#include "loom/core/dtype.h"
#include "loom/core/error.h"
#include "loom/core/tensor.h"

namespace loom {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A problem in float64, laid out like the kernel's contiguous tensors. The mask is stored
// densely as (B, Hq, Sq, Skv) for the reference; how it is handed to the kernel (broadcast
// strides or not) is up to the test.
struct Problem {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  bool causal;
  double scale;
  std::vector<double> q, k, v, mask;  // mask empty when absent
  std::vector<double> gout;           // upstream gradient of out
  // Causal: query i stands at key position i + offset and sees keys j <= i + offset, with a
  // window (> 0) only j > i + offset - window.
  int64_t window = 0, offset = 0;

  int64_t q_index(int64_t b, int64_t h, int64_t i, int64_t c) const {
    return ((b * heads_q + h) * seq_q + i) * dim + c;
  }
  int64_t kv_index(int64_t b, int64_t h, int64_t j, int64_t c) const {
    return ((b * heads_kv + h) * seq_kv + j) * dim + c;
  }
  int64_t mask_index(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return ((b * heads_q + h) * seq_q + i) * seq_kv + j;
  }
};

struct Reference {
  std::vector<double> out, lse, gq, gk, gv;
};

// Scaled, masked scores of one query row; -inf where masked or hidden by causality.
std::vector<double> reference_scores(const Problem& p, int64_t b, int64_t h, int64_t i) {
  const int64_t kvh = h / (p.heads_q / p.heads_kv);
  std::vector<double> s(p.seq_kv);
  for (int64_t j = 0; j < p.seq_kv; ++j) {
    const bool hidden =
        p.causal && (j > i + p.offset || (p.window > 0 && j <= i + p.offset - p.window));
    if (hidden) {
      s[j] = -kInf;
      continue;
    }
    double dot = 0;
    for (int64_t c = 0; c < p.dim; ++c)
      dot += p.q[p.q_index(b, h, i, c)] * p.k[p.kv_index(b, kvh, j, c)];
    s[j] = p.scale * dot + (p.mask.empty() ? 0.0 : p.mask[p.mask_index(b, h, i, j)]);
  }
  return s;
}

// Softmax of one row; all zeros (and lse = -inf) when every entry is -inf.
std::vector<double> reference_probs(const std::vector<double>& s, double* lse) {
  double mx = -kInf;
  for (double x : s) mx = std::max(mx, x);
  std::vector<double> prob(s.size(), 0.0);
  if (mx == -kInf) {
    *lse = -kInf;
    return prob;
  }
  double sum = 0;
  for (size_t j = 0; j < s.size(); ++j) sum += (prob[j] = std::exp(s[j] - mx));
  for (double& x : prob) x /= sum;
  *lse = mx + std::log(sum);
  return prob;
}

Reference reference_forward(const Problem& p) {
  Reference r;
  r.out.assign(p.q.size(), 0.0);
  r.lse.assign(p.batch * p.heads_q * p.seq_q, 0.0);
  const int64_t group = p.heads_q / p.heads_kv;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        double lse;
        const std::vector<double> prob = reference_probs(reference_scores(p, b, h, i), &lse);
        r.lse[(b * p.heads_q + h) * p.seq_q + i] = lse;
        for (int64_t j = 0; j < p.seq_kv; ++j)
          for (int64_t c = 0; c < p.dim; ++c)
            r.out[p.q_index(b, h, i, c)] += prob[j] * p.v[p.kv_index(b, h / group, j, c)];
      }
  return r;
}

// Analytic backward of the softmax attention, row by row, from the full probability row:
// dP = dO V^T, dS = P * (dP - sum_j P dP), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
void reference_backward(const Problem& p, Reference& r) {
  r.gq.assign(p.q.size(), 0.0);
  r.gk.assign(p.k.size(), 0.0);
  r.gv.assign(p.v.size(), 0.0);
  const int64_t group = p.heads_q / p.heads_kv;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        const int64_t kvh = h / group;
        double lse;
        const std::vector<double> prob = reference_probs(reference_scores(p, b, h, i), &lse);
        std::vector<double> dprob(p.seq_kv, 0.0);
        double weighted = 0;
        for (int64_t j = 0; j < p.seq_kv; ++j) {
          for (int64_t c = 0; c < p.dim; ++c) {
            dprob[j] += p.gout[p.q_index(b, h, i, c)] * p.v[p.kv_index(b, kvh, j, c)];
            r.gv[p.kv_index(b, kvh, j, c)] += prob[j] * p.gout[p.q_index(b, h, i, c)];
          }
          weighted += prob[j] * dprob[j];
        }
        for (int64_t j = 0; j < p.seq_kv; ++j) {
          const double ds = prob[j] * (dprob[j] - weighted) * p.scale;
          for (int64_t c = 0; c < p.dim; ++c) {
            r.gq[p.q_index(b, h, i, c)] += ds * p.k[p.kv_index(b, kvh, j, c)];
            r.gk[p.kv_index(b, kvh, j, c)] += ds * p.q[p.q_index(b, h, i, c)];
          }
        }
      }
}

double bf16_round(double x) {
  return to_f32(to_bf16(float(x)));
}

enum class MaskKind {
  None,
  Full,        // dense (B, Hq, Sq, Skv) with scattered -inf and one fully masked row
  Broadcast,   // one (Sq, Skv) matrix seen through strides (0, 0, Skv, 1)
  SizeOne,     // shape (1, 1, Sq, Skv): size-1 dims broadcast
  Transposed,  // (Skv, Sq) storage seen as (B, Hq, Sq, Skv) with strides (0, 0, 1, Sq)
};

struct Case {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  bool causal;
  MaskKind mask;
  DType dtype = DType::F32;
  double scale = 0;  // 0: 1/sqrt(D)
  // Every operand stored as (B, S, H, D + 3) and seen as (B, H, S, D): contiguous rows, all
  // other strides unusual (the layout of q/k/v sliced from a fused projection).
  bool interleaved = false;
  int64_t window = 0;          // causal: a sliding window of this many keys (0: none)
  int64_t offset = kLastRows;  // causal: query i's key position is i + offset
  static constexpr int64_t kLastRows = INT64_MIN;  // the queries are the keys' last rows
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.batch) + " Hq=" + std::to_string(c.heads_q) +
         " Hkv=" + std::to_string(c.heads_kv) + " Sq=" + std::to_string(c.seq_q) +
         " Skv=" + std::to_string(c.seq_kv) + " D=" + std::to_string(c.dim) +
         (c.causal ? " causal" : "") + (c.window > 0 ? " window=" + std::to_string(c.window) : "") +
         (c.offset != Case::kLastRows ? " offset=" + std::to_string(c.offset) : "") +
         " mask=" + std::to_string(int(c.mask)) + " " + dtype_name(c.dtype) +
         (c.interleaved ? " interleaved" : "");
}

// Fresh random inputs per case: the seed mixes a per-test counter.
Problem make_problem(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Problem p{
      c.batch,  c.heads_q, c.heads_kv, c.seq_q,
      c.seq_kv, c.dim,     c.causal,   c.scale != 0 ? c.scale : 1.0 / std::sqrt(double(c.dim)),
      {},       {},        {},         {},
      {}};
  p.window = c.window;
  p.offset = c.offset == Case::kLastRows ? c.seq_kv - c.seq_q : c.offset;
  const bool round = c.dtype != DType::F32;
  auto fill = [&](std::vector<double>& x, int64_t n) {
    x.resize(n);
    for (double& e : x) e = round ? bf16_round(normal(rng)) : double(float(normal(rng)));
  };
  fill(p.q, c.batch * c.heads_q * c.seq_q * c.dim);
  fill(p.k, c.batch * c.heads_kv * c.seq_kv * c.dim);
  fill(p.v, c.batch * c.heads_kv * c.seq_kv * c.dim);
  fill(p.gout, c.batch * c.heads_q * c.seq_q * c.dim);
  if (c.mask == MaskKind::None) return p;

  // Mask values in f32 (the kernel's mask dtype): mostly small biases, some -inf.
  const bool per_head = c.mask == MaskKind::Full;
  const int64_t mb = per_head ? c.batch : 1, mh = per_head ? c.heads_q : 1;
  std::vector<double> small(mb * mh * c.seq_q * c.seq_kv);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (double& e : small) e = unit(rng) < 0.2 ? -kInf : double(float(normal(rng)));
  // One fully masked query row (in every broadcast copy): out, lse and grads must be 0/-inf.
  const int64_t dead_row = c.seq_q / 2;
  for (int64_t s = 0; s < mb * mh; ++s)
    for (int64_t j = 0; j < c.seq_kv; ++j) small[(s * c.seq_q + dead_row) * c.seq_kv + j] = -kInf;
  p.mask.resize(c.batch * c.heads_q * c.seq_q * c.seq_kv);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.seq_q; ++i)
        for (int64_t j = 0; j < c.seq_kv; ++j) {
          const int64_t src =
              per_head ? ((b * c.heads_q + h) * c.seq_q + i) * c.seq_kv + j : i * c.seq_kv + j;
          p.mask[p.mask_index(b, h, i, j)] = small[src];
        }
  return p;
}

// The kernel's view of p.mask in the layout the case asks for.
Tensor make_mask(const Case& c, const Problem& p) {
  const Shape full{c.batch, c.heads_q, c.seq_q, c.seq_kv};
  switch (c.mask) {
    case MaskKind::None:
      return Tensor();
    case MaskKind::Full: {
      Tensor t = Tensor::empty(full, DType::F32);
      float* d = t.data<float>();
      for (size_t i = 0; i < p.mask.size(); ++i) d[i] = float(p.mask[i]);
      return t;
    }
    case MaskKind::Broadcast:
    case MaskKind::SizeOne: {
      Tensor t = Tensor::empty({1, 1, c.seq_q, c.seq_kv}, DType::F32);
      float* d = t.data<float>();
      for (int64_t i = 0; i < c.seq_q * c.seq_kv; ++i) d[i] = float(p.mask[i]);
      if (c.mask == MaskKind::SizeOne) return t;
      return t.as_strided(full, {0, 0, c.seq_kv, 1}, 0);
    }
    case MaskKind::Transposed: {
      Tensor t = Tensor::empty({c.seq_kv, c.seq_q}, DType::F32);
      float* d = t.data<float>();
      for (int64_t i = 0; i < c.seq_q; ++i)
        for (int64_t j = 0; j < c.seq_kv; ++j) d[j * c.seq_q + i] = float(p.mask[i * c.seq_kv + j]);
      return t.as_strided(full, {0, 0, 1, c.seq_q}, 0);
    }
  }
  return Tensor();
}

Tensor to_tensor(const std::vector<double>& x, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  if (dtype == DType::F32) {
    for (size_t i = 0; i < x.size(); ++i) t.data<float>()[i] = float(x[i]);
  } else if (dtype == DType::BF16) {
    for (size_t i = 0; i < x.size(); ++i) t.data<bf16>()[i] = to_bf16(float(x[i]));
  } else {
    for (size_t i = 0; i < x.size(); ++i) t.data<f16>()[i] = to_f16(float(x[i]));
  }
  return t;
}

std::vector<double> from_tensor(const Tensor& strided) {
  Tensor t = strided;
  if (!t.is_contiguous()) {
    t = Tensor::empty(strided.shape(), strided.dtype());
    cpu_backend().copy(strided, t);
  }
  std::vector<double> x(t.numel());
  for (size_t i = 0; i < x.size(); ++i) {
    if (t.dtype() == DType::F32)
      x[i] = t.data<float>()[i];
    else if (t.dtype() == DType::BF16)
      x[i] = to_f32(t.data<bf16>()[i]);
    else
      x[i] = to_f32(t.data<f16>()[i]);
  }
  return x;
}

// An output filled with NaN, so any element the kernel leaves unwritten fails the comparison.
Tensor poisoned(const Shape& shape, DType dtype) {
  const std::vector<double> nan(shape_numel(shape), std::numeric_limits<double>::quiet_NaN());
  return to_tensor(nan, shape, dtype);
}

// max |got - want| / max |want|; any NaN fails. The denominator has a floor of 1e-2: with a
// single visible key dQ and dK are exactly 0 (P = 1, dS = P (dP - Delta) = 0), yet f32 leaves
// the cancellation residue ~eps |dP| ~ 1e-7 for the O(1) inputs used here.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-2, err = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << ": NaN (unwritten?) at " << i;
    err = std::max(err, std::abs(got[i] - want[i]));
  }
  EXPECT_LE(err / scale, tol) << what << ": max abs error " << err << ", max |ref| " << scale;
}

// lse: -inf exactly where the reference row is fully masked, else close in absolute terms.
void expect_lse(const std::vector<double>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == -kInf) {
      ASSERT_EQ(got[i], -kInf) << what << ": lse row " << i << " should be -inf";
    } else {
      ASSERT_LE(std::abs(got[i] - want[i]), tol * std::max(1.0, std::abs(want[i])))
          << what << ": lse row " << i << " got " << got[i] << " want " << want[i];
    }
  }
}

struct KernelResult {
  std::vector<double> out, lse, gq, gk, gv;
};

// t (B, H, S, D) copied into a NaN-filled (B, S, H, D + 3) buffer and seen as (B, H, S, D).
Tensor interleave(const Tensor& t) {
  const int64_t B = t.size(0), H = t.size(1), S = t.size(2), D = t.size(3), P = D + 3;
  Tensor buf = poisoned({B, S, H, P}, t.dtype());
  Tensor view = buf.as_strided({B, H, S, D}, {S * H * P, P, H * P, 1}, 0);
  cpu_backend().copy(t, view);
  return view;
}

// The padding of an interleaved operand must still be NaN: nothing wrote past a row.
void expect_padding_untouched(const Tensor& view, const char* what) {
  const int64_t D = view.size(3), P = view.stride(1);
  const std::vector<double> all =
      from_tensor(view.as_strided({view.size(0) * view.stride(0)}, {1}, 0));
  for (size_t i = 0; i < all.size(); ++i) {
    if (int64_t(i) % P >= D) {
      ASSERT_TRUE(std::isnan(all[i])) << what << ": padding written at " << i;
    }
  }
}

KernelResult run_kernel(const Case& c, const Problem& p, DType dtype) {
  const Shape qs{c.batch, c.heads_q, c.seq_q, c.dim}, ks{c.batch, c.heads_kv, c.seq_kv, c.dim};
  auto layout = [&](const Tensor& t) { return c.interleaved ? interleave(t) : t; };
  const Tensor q = layout(to_tensor(p.q, qs, dtype)), k = layout(to_tensor(p.k, ks, dtype)),
               v = layout(to_tensor(p.v, ks, dtype)), gout = layout(to_tensor(p.gout, qs, dtype));
  const Tensor mask = make_mask(c, p);
  const Tensor out = layout(poisoned(qs, dtype)),
               lse = poisoned({c.batch, c.heads_q, c.seq_q}, DType::F32);
  const Tensor gq = layout(poisoned(qs, dtype)), gk = layout(poisoned(ks, dtype)),
               gv = layout(poisoned(ks, dtype));
  Backend& be = cpu_backend();
  const AttentionBand band{c.causal, c.window, p.offset};
  be.attention_forward(q, k, v, mask, float(p.scale), band, out, lse);
  be.attention_backward(q, k, v, mask, float(p.scale), band, out, lse, gout, gq, gk, gv);
  if (c.interleaved) {
    expect_padding_untouched(out, "out");
    expect_padding_untouched(gq, "gq");
    expect_padding_untouched(gk, "gk");
    expect_padding_untouched(gv, "gv");
  }
  return {from_tensor(out), from_tensor(lse), from_tensor(gq), from_tensor(gk), from_tensor(gv)};
}

void check_kernel(const Case& c, const Problem& p, const Reference& ref) {
  const KernelResult got = run_kernel(c, p, c.dtype);
  const double tol = c.dtype == DType::F32 ? 1e-4 : 3e-2;
  expect_close(got.out, ref.out, tol, "out");
  expect_lse(got.lse, ref.lse, c.dtype == DType::F32 ? 1e-5 : 1e-2, "lse");
  expect_close(got.gq, ref.gq, tol, "gq");
  expect_close(got.gk, ref.gk, tol, "gk");
  expect_close(got.gv, ref.gv, tol, "gv");
  if (c.dtype != DType::F32) {
    // The 16-bit path against the f32 kernel on the same (already rounded) inputs.
    const KernelResult f32 = run_kernel(c, p, DType::F32);
    expect_close(got.out, f32.out, tol, "out vs f32 kernel");
    expect_close(got.gq, f32.gq, tol, "gq vs f32 kernel");
    expect_close(got.gk, f32.gk, tol, "gk vs f32 kernel");
    expect_close(got.gv, f32.gv, tol, "gv vs f32 kernel");
  }
}

void check_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const Problem p = make_problem(c, seed);
  Reference ref = reference_forward(p);
  reference_backward(p, ref);
  check_kernel(c, p, ref);  // the kernel the backend chooses
  if (c.dtype == DType::BF16) {
    SCOPED_TRACE("flash kernel");
    cpu::ForceFlashAttention flash;
    check_kernel(c, p, ref);
  }
}

uint32_t next_seed() {
  static uint32_t counter = 0;
  return 0x9e3779b9u * ++counter;
}

// The analytic reference backward against central differences of the reference forward, for
// the scalar loss L = sum(out * gout). Tiny GQA + causal (Skv > Sq) + mask problem.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const Case c{1, 2, 1, 3, 5, 3, true, MaskKind::Full};
  Problem p = make_problem(c, 12345);
  Reference ref = reference_forward(p);
  reference_backward(p, ref);
  auto loss = [&]() {
    const Reference r = reference_forward(p);
    double l = 0;
    for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * p.gout[i];
    return l;
  };
  const double h = 1e-6;
  auto check = [&](std::vector<double>& x, const std::vector<double>& analytic, const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double up = loss();
      x[i] = saved - h;
      const double down = loss();
      x[i] = saved;
      EXPECT_NEAR((up - down) / (2 * h), analytic[i], 1e-7) << name << "[" << i << "]";
    }
  };
  check(p.q, ref.gq, "gq");
  check(p.k, ref.gk, "gk");
  check(p.v, ref.gv, "gv");
}

TEST(AttentionKernel, MatchesReferenceNonCausal) {
  for (int64_t s : {1, 7, 65, 130, 257})
    check_case({2, 2, 2, s, s, 8, false, MaskKind::None}, next_seed());
  check_case({1, 2, 2, 130, 130, 64, false, MaskKind::None}, next_seed());
}

TEST(AttentionKernel, MatchesReferenceCausal) {
  for (int64_t s : {1, 7, 65, 130, 257})
    check_case({2, 2, 2, s, s, 8, true, MaskKind::None}, next_seed());
  check_case({1, 2, 2, 257, 257, 64, true, MaskKind::None}, next_seed());
}

TEST(AttentionKernel, CausalWithMoreKeysThanQueries) {
  // Query i sees keys j <= i + (Skv - Sq): the queries are the last Sq positions.
  check_case({1, 2, 2, 7, 130, 8, true, MaskKind::None}, next_seed());
  check_case({1, 2, 2, 65, 257, 64, true, MaskKind::None}, next_seed());
  check_case({1, 1, 1, 1, 65, 8, true, MaskKind::None}, next_seed());
  check_case({1, 2, 2, 130, 131, 8, true, MaskKind::None}, next_seed());
}

TEST(AttentionKernel, CausalWithMoreQueriesThanKeys) {
  // The first Sq - Skv queries see no key at all: out 0, lse -inf, gradients 0.
  check_case({1, 2, 2, 130, 65, 8, true, MaskKind::None}, next_seed());
  check_case({1, 1, 1, 7, 1, 8, true, MaskKind::None}, next_seed());
}

TEST(AttentionKernel, GroupedQueryAttention) {
  check_case({2, 4, 2, 65, 65, 8, true, MaskKind::None}, next_seed());
  check_case({2, 4, 1, 130, 130, 8, false, MaskKind::None}, next_seed());
  check_case({1, 4, 1, 257, 257, 64, true, MaskKind::None}, next_seed());
  check_case({1, 4, 2, 7, 65, 64, false, MaskKind::None}, next_seed());
}

TEST(AttentionKernel, AdditiveMask) {
  // Every mask case holds scattered -inf and one fully masked query row.
  check_case({2, 2, 2, 65, 65, 8, false, MaskKind::Full}, next_seed());
  check_case({2, 4, 2, 130, 130, 8, true, MaskKind::Full}, next_seed());
  check_case({2, 4, 1, 7, 257, 64, true, MaskKind::Broadcast}, next_seed());
  check_case({1, 2, 2, 130, 65, 8, false, MaskKind::Broadcast}, next_seed());
  check_case({2, 2, 1, 65, 130, 8, false, MaskKind::SizeOne}, next_seed());
  check_case({2, 2, 2, 130, 130, 64, true, MaskKind::Transposed}, next_seed());
  check_case({1, 1, 1, 1, 7, 8, false, MaskKind::Full}, next_seed());
}

TEST(AttentionKernel, CustomScaleAndOddHeadDim) {
  check_case({1, 2, 2, 65, 65, 8, true, MaskKind::None, DType::F32, 0.9}, next_seed());
  check_case({1, 2, 1, 33, 40, 5, true, MaskKind::Full}, next_seed());
}

TEST(AttentionKernel, InterleavedLayoutsReadAndWrittenInPlace) {
  check_case({2, 4, 2, 130, 130, 8, true, MaskKind::None, DType::F32, 0, true}, next_seed());
  check_case({1, 2, 2, 65, 257, 64, false, MaskKind::Full, DType::F32, 0, true}, next_seed());
  check_case({2, 4, 1, 65, 130, 64, true, MaskKind::None, DType::BF16, 0, true}, next_seed());
}

// Without a causal mask, up to 256 keys are one tile by up to 256 queries (attention.cpp): a
// DiT's 196 tokens in the interleaved layout of one qkv projection, f32 and bf16; more queries
// than one tile holds; and 256 / 257 keys on either side of the rule.
TEST(AttentionKernel, ShortNonCausalSequencesAsOneTile) {
  check_case({2, 4, 4, 196, 196, 64, false, MaskKind::None, DType::F32, 0, true}, next_seed());
  check_case({1, 2, 2, 196, 196, 64, false, MaskKind::Full, DType::BF16, 0, true}, next_seed());
  check_case({1, 2, 1, 300, 200, 8, false, MaskKind::Broadcast}, next_seed());
  check_case({1, 2, 2, 256, 256, 8, false, MaskKind::None}, next_seed());
  check_case({1, 2, 2, 40, 257, 8, false, MaskKind::Full}, next_seed());
}

// One run with 1 thread and one with more must agree bit for bit.
void expect_same_bits_for_any_thread_count(const Case& c) {
  const Problem p = make_problem(c, next_seed());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const KernelResult one = run_kernel(c, p, c.dtype);
  omp_set_num_threads(std::max(threads, 3));
  const KernelResult many = run_kernel(c, p, c.dtype);
  omp_set_num_threads(threads);
  for (auto field : {&KernelResult::out, &KernelResult::gq, &KernelResult::gk, &KernelResult::gv})
    EXPECT_EQ(one.*field, many.*field);
  EXPECT_EQ(one.lse, many.lse);
}

TEST(AttentionKernel, BitwiseIdenticalForAnyThreadCount) {
  // Each output element is produced by one task in a fixed order, so the thread count must
  // not change a single bit (the house's parity tests rely on this).
  expect_same_bits_for_any_thread_count({2, 4, 2, 130, 130, 64, true, MaskKind::Broadcast});
}

TEST(AttentionKernel, Bf16MatchesF32WithinBf16Tolerance) {
  check_case({2, 2, 2, 130, 130, 64, true, MaskKind::None, DType::BF16}, next_seed());
  check_case({1, 4, 1, 65, 257, 8, true, MaskKind::None, DType::BF16}, next_seed());
  check_case({1, 4, 2, 65, 130, 64, false, MaskKind::Broadcast, DType::BF16}, next_seed());
  check_case({1, 2, 2, 7, 7, 8, true, MaskKind::Full, DType::BF16}, next_seed());
}

// Whether the CPU can multiply bf16 natively (AVX512-BF16 or AMX), read from CPUID rather than
// from oneDNN, which the kernel asks.
bool cpu_has_native_bf16() {
  return __builtin_cpu_supports("avx512bf16") != 0;  // every AMX CPU has AVX512-BF16 too
}

// The GEMM kernel takes bf16 problems with as many kv heads as query heads and at most 1 Mi
// scores per head, on CPUs with native bf16; everything else stays flash-style.
TEST(AttentionKernel, GemmKernelTakesShortBf16SequencesOnNativeBf16) {
  auto bf16 = [](Shape s) { return Tensor::empty(s, DType::BF16); };
  const bool native = cpu_has_native_bf16();
  EXPECT_EQ(cpu::attention_gemm_applies(bf16({64, 4, 196, 64}), bf16({64, 4, 196, 64})), native);
  EXPECT_EQ(cpu::attention_gemm_applies(bf16({1, 12, 1024, 64}), bf16({1, 12, 1024, 64})), native);
  EXPECT_FALSE(cpu::attention_gemm_applies(bf16({1, 4, 1025, 64}), bf16({1, 4, 1024, 64})));
  EXPECT_FALSE(cpu::attention_gemm_applies(bf16({1, 4, 64, 64}), bf16({1, 2, 64, 64})));  // GQA
  EXPECT_FALSE(cpu::attention_gemm_applies(Tensor::empty({1, 4, 64, 64}, DType::F32),
                                           Tensor::empty({1, 4, 64, 64}, DType::F32)));
  {
    cpu::ForceFlashAttention flash;
    EXPECT_FALSE(cpu::attention_gemm_applies(bf16({64, 4, 196, 64}), bf16({64, 4, 196, 64})));
  }
}

// Tasks of one head (a batch too small to share out; here the longest sequence the GEMM kernel
// takes) and of all heads of a batch element (with mask, in the interleaved layout).
TEST(AttentionKernel, Bf16TasksOfOneHeadAndOfAllHeads) {
  check_case({1, 2, 2, 1024, 1024, 8, true, MaskKind::None, DType::BF16}, next_seed());
  check_case({9, 3, 3, 130, 130, 16, true, MaskKind::Full, DType::BF16, 0, true}, next_seed());
}

TEST(AttentionKernel, Bf16BitwiseIdenticalForAnyThreadCount) {
  expect_same_bits_for_any_thread_count(
      {3, 4, 4, 196, 196, 64, false, MaskKind::Broadcast, DType::BF16, 0, true});
  expect_same_bits_for_any_thread_count({2, 3, 3, 257, 257, 64, true, MaskKind::None, DType::BF16});
}

// Causal bf16 problems on the GEMM kernel: a causal offset either way (more keys than queries;
// more queries than keys, whose first queries see no key at all and must come out 0), a mask
// on top, and lengths that are not a multiple of any tile.
TEST(AttentionKernel, Bf16Causal) {
  check_case({2, 2, 2, 200, 200, 64, true, MaskKind::None, DType::BF16}, next_seed());
  check_case({1, 2, 2, 130, 131, 64, true, MaskKind::None, DType::BF16}, next_seed());
  check_case({1, 2, 2, 257, 300, 16, true, MaskKind::Full, DType::BF16, 0, true}, next_seed());
  check_case({1, 2, 2, 200, 65, 64, true, MaskKind::None, DType::BF16}, next_seed());
  check_case({2, 3, 3, 256, 256, 64, true, MaskKind::Broadcast, DType::BF16}, next_seed());
}

// Sliding windows (Mistral's: query i sees keys (i + offset - window, i + offset]): narrower
// and wider than a tile, one key, wider than the sequence (plain causal), more keys than
// queries (decoding), GQA and a mask on top; f32 on the flash kernel, bf16 on both kernels.
TEST(AttentionKernel, SlidingWindow) {
  for (int64_t w : {1, 5, 64, 129, 300}) {
    Case c{2, 2, 2, 257, 257, 8, true, MaskKind::None};
    c.window = w;
    check_case(c, next_seed());
  }
  Case decode{1, 4, 2, 7, 300, 16, true, MaskKind::None};
  decode.window = 50;
  check_case(decode, next_seed());
  Case masked{2, 4, 1, 130, 130, 8, true, MaskKind::Full};
  masked.window = 40;
  check_case(masked, next_seed());
  for (DType dtype : {DType::BF16, DType::F16}) {
    Case c{2, 3, 3, 200, 200, 64, true, MaskKind::None, dtype, 0, true};
    c.window = 70;
    check_case(c, next_seed());
  }
}

// Ring attention's blocks: the queries at other positions than the keys' last rows. A key
// block before the queries seen through a window (some rows then see no key: out 0, lse -inf),
// and a block whose every key some query sees.
TEST(AttentionKernel, BandAtAnOffset) {
  for (auto [offset, window] :
       std::vector<std::pair<int64_t, int64_t>>{{130, 64}, {200, 100}, {70, 0}, {130, 300}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      Case c{1, 2, 2, 130, 130, 16, true, MaskKind::None, dtype};
      c.window = window;
      c.offset = offset;
      check_case(c, next_seed());
    }
  }
}

TEST(AttentionKernel, SlidingWindowBitwiseIdenticalForAnyThreadCount) {
  Case c{2, 4, 2, 300, 300, 64, true, MaskKind::None};
  c.window = 100;
  expect_same_bits_for_any_thread_count(c);
}

TEST(AttentionKernel, F16UsesTheSamePath) {
  // make_problem rounds to bf16, which f16 holds exactly at these magnitudes.
  check_case({1, 2, 1, 65, 130, 64, true, MaskKind::Full, DType::F16}, next_seed());
}

TEST(AttentionKernel, RejectsBadInputs) {
  const Tensor q = Tensor::empty({1, 3, 8, 4}), k = Tensor::empty({1, 2, 8, 4});
  const Tensor out = Tensor::empty({1, 3, 8, 4}), lse = Tensor::empty({1, 3, 8});
  Backend& be = cpu_backend();
  // Hq = 3 is not a multiple of Hkv = 2.
  EXPECT_THROW(be.attention_forward(q, k, k, Tensor(), 1.0f, AttentionBand{}, out, lse), Error);

  const Tensor q2 = Tensor::empty({1, 2, 8, 4}), out2 = Tensor::empty({1, 2, 8, 4});
  const Tensor lse2 = Tensor::empty({1, 2, 8});
  // 3-D k.
  EXPECT_THROW(be.attention_forward(q2, Tensor::empty({2, 8, 4}), k, Tensor(), 1.0f,
                                    AttentionBand{}, out2, lse2),
               Error);
  // Head dim mismatch.
  EXPECT_THROW(be.attention_forward(q2, Tensor::empty({1, 2, 8, 5}), Tensor::empty({1, 2, 8, 5}),
                                    Tensor(), 1.0f, AttentionBand{}, out2, lse2),
               Error);
  // Mixed dtypes.
  EXPECT_THROW(be.attention_forward(q2, Tensor::empty({1, 2, 8, 4}, DType::BF16), k, Tensor(), 1.0f,
                                    AttentionBand{}, out2, lse2),
               Error);
  // Integer inputs.
  const Tensor qi = Tensor::empty({1, 2, 8, 4}, DType::I32);
  EXPECT_THROW(be.attention_forward(qi, qi, qi, Tensor(), 1.0f, AttentionBand{}, qi, lse2), Error);
  // Mask that does not broadcast, and a non-f32 mask.
  EXPECT_THROW(be.attention_forward(q2, k, k, Tensor::empty({1, 2, 8, 7}), 1.0f, AttentionBand{},
                                    out2, lse2),
               Error);
  EXPECT_THROW(be.attention_forward(q2, k, k, Tensor::empty({1, 1, 8, 8}, DType::BF16), 1.0f,
                                    AttentionBand{}, out2, lse2),
               Error);
  // lse of the wrong shape; a gradient of the wrong shape.
  EXPECT_THROW(
      be.attention_forward(q2, k, k, Tensor(), 1.0f, AttentionBand{}, out2, Tensor::empty({1, 2})),
      Error);
  EXPECT_THROW(be.attention_backward(q2, k, k, Tensor(), 1.0f, AttentionBand{}, out2, lse2, out2,
                                     Tensor::empty({1, 2, 8, 3}), k, k),
               Error);
  try {
    be.attention_forward(q, k, k, Tensor(), 1.0f, AttentionBand{}, out, lse);
    FAIL() << "expected loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
