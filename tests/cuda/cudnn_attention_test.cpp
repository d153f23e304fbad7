// cuDNN's fused attention, the CUDA backend's fast path (cudnn_attention.h), at the shapes the
// models use (head dims 64 and 128, a thousand tokens, GQA, q/k/v as strided views of one qkv
// projection), against the CPU backend in f32 on the same bf16-rounded inputs (the CPU kernels
// are checked against float64 finite differences by the op harness). GPU only: the emulated
// backend has no cuDNN. Fails, naming the reason, if the fast path did not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "loom/backend/backend.h"
#include "loom/backend/cuda/cudnn_attention.h"
#include "loom/ops/ops.h"

namespace {

using loom::DType;
using loom::Shape;
using loom::Tensor;

const loom::Device kCuda{loom::DeviceType::CUDA, 0};

struct Problem {
  const char* label;
  int64_t batch, heads_q, heads_kv, seq, dim;
  bool causal;
};

Tensor random_host(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(size_t(loom::shape_numel(shape)));
  for (float& x : v) x = normal(rng);
  // Rounded to bf16 here, so the f32 reference sees exactly the GPU's inputs.
  return loom::to_dtype(loom::to_dtype(loom::from_vector(v, shape), DType::BF16), DType::F32);
}

// max |a - b| / max |b|
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = loom::to_vector(loom::to_dtype(a, DType::F32));
  const std::vector<float> y = loom::to_vector(loom::to_dtype(b, DType::F32));
  double diff = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
    scale = std::max(scale, double(std::fabs(y[i])));
  }
  return diff / scale;
}

// (B, S, Hq + 2 Hkv, D) on `device` in `dtype`, and q, k, v as (B, H, S, D) views of it: the
// layout the models' fused qkv projection gives.
struct Qkv {
  Tensor all, q, k, v;
};
Qkv qkv_views(const Tensor& host, const Problem& p, DType dtype, loom::Device device) {
  Qkv r;
  r.all = loom::to_device(loom::to_dtype(host, dtype), device);
  auto heads = [&](int64_t start, int64_t n) {
    return loom::permute(loom::narrow(r.all, 2, start, n), {0, 2, 1, 3});
  };
  r.q = heads(0, p.heads_q);
  r.k = heads(p.heads_q, p.heads_kv);
  r.v = heads(p.heads_q + p.heads_kv, p.heads_kv);
  return r;
}

struct Result {
  Tensor out, lse, gq, gk, gv;
};

Result run(loom::Backend& backend, const Qkv& x, const Tensor& gout_host, const Problem& p,
           DType dtype, loom::Device device) {
  const float scale = float(1.0 / std::sqrt(double(p.dim)));
  const Shape qs{p.batch, p.heads_q, p.seq, p.dim}, kvs{p.batch, p.heads_kv, p.seq, p.dim};
  Result r;
  r.out = Tensor::empty(qs, dtype, device);
  r.lse = Tensor::empty({p.batch, p.heads_q, p.seq}, DType::F32, device);
  const loom::AttentionBand band = loom::AttentionBand::last_rows(p.causal, p.seq, p.seq);
  backend.attention_forward(x.q, x.k, x.v, Tensor(), scale, band, r.out, r.lse);
  const Tensor gout = loom::to_device(loom::to_dtype(gout_host, dtype), device);
  r.gq = Tensor::empty(qs, dtype, device);
  r.gk = Tensor::empty(kvs, dtype, device);
  r.gv = Tensor::empty(kvs, dtype, device);
  backend.attention_backward(x.q, x.k, x.v, Tensor(), scale, band, r.out, r.lse, gout, r.gq, r.gk,
                             r.gv);
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = loom::to_device(a, loom::cpu_device()),
               y = loom::to_device(b, loom::cpu_device());
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST(CudnnAttention, MatchesTheCpuAndRepeatsBitForBit) {
  const std::vector<Problem> problems{
      {"gpt2 causal", 2, 12, 12, 1024, 64, true},
      {"dit bidirectional, odd length", 4, 6, 6, 260, 64, false},
      {"gqa causal, head dim 128", 2, 8, 2, 512, 128, true},
  };
  std::mt19937 rng(11);
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.label);
    const auto before = loom::cuda::cudnn_attention_status();
    const Tensor qkv = random_host({p.batch, p.seq, p.heads_q + 2 * p.heads_kv, p.dim}, rng);
    const Tensor gout = random_host({p.batch, p.heads_q, p.seq, p.dim}, rng);
    const Result want = run(loom::cpu_backend(), qkv_views(qkv, p, DType::F32, loom::cpu_device()),
                            gout, p, DType::F32, loom::cpu_device());
    const Qkv x = qkv_views(qkv, p, DType::BF16, kCuda);
    const Result got = run(loom::backend_for(kCuda), x, gout, p, DType::BF16, kCuda);
    const auto after = loom::cuda::cudnn_attention_status();
    ASSERT_EQ(after.forward_runs, before.forward_runs + 1)
        << "the forward did not run on cuDNN: " << after.last_refusal;
    ASSERT_EQ(after.backward_runs, before.backward_runs + 1)
        << "the backward did not run on cuDNN: " << after.last_refusal;
    // bf16 outputs (8 mantissa bits) of f32-accumulated sums: 2% of the largest magnitude.
    EXPECT_LT(relative_error(got.out, want.out), 2e-2);
    EXPECT_LT(relative_error(got.lse, want.lse), 1e-3);  // f32 statistics
    EXPECT_LT(relative_error(got.gq, want.gq), 3e-2);
    EXPECT_LT(relative_error(got.gk, want.gk), 3e-2);
    EXPECT_LT(relative_error(got.gv, want.gv), 3e-2);
    // cuDNN's deterministic backward: the same bits again.
    const Result again = run(loom::backend_for(kCuda), x, gout, p, DType::BF16, kCuda);
    EXPECT_TRUE(same_bits(got.out, again.out));
    EXPECT_TRUE(same_bits(got.gq, again.gq));
    EXPECT_TRUE(same_bits(got.gk, again.gk));
    EXPECT_TRUE(same_bits(got.gv, again.gv));
    std::printf("[cudnn] %s: cuDNN %lld, out %.2e, dq %.2e, dk %.2e, dv %.2e\n", p.label,
                static_cast<long long>(after.version), relative_error(got.out, want.out),
                relative_error(got.gq, want.gq), relative_error(got.gk, want.gk),
                relative_error(got.gv, want.gv));
  }
}

// What cuDNN does not take (f32, a head dim that is not a multiple of 8) runs on the own
// kernels, and gives the same answer as the CPU.
TEST(CudnnAttention, DeclinedProblemsRunOnTheOwnKernels) {
  const Problem p{"f32, head dim 12", 1, 2, 2, 40, 12, true};
  std::mt19937 rng(12);
  const Tensor qkv = random_host({p.batch, p.seq, p.heads_q + 2 * p.heads_kv, p.dim}, rng);
  const Tensor gout = random_host({p.batch, p.heads_q, p.seq, p.dim}, rng);
  const Result want = run(loom::cpu_backend(), qkv_views(qkv, p, DType::F32, loom::cpu_device()),
                          gout, p, DType::F32, loom::cpu_device());
  const auto before = loom::cuda::cudnn_attention_status();
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Result got =
        run(loom::backend_for(kCuda), qkv_views(qkv, p, dtype, kCuda), gout, p, dtype, kCuda);
    const double tol = dtype == DType::F32 ? 1e-4 : 3e-2;
    EXPECT_LT(relative_error(got.out, want.out), tol) << loom::dtype_name(dtype);
    EXPECT_LT(relative_error(got.gq, want.gq), tol) << loom::dtype_name(dtype);
    EXPECT_LT(relative_error(got.gk, want.gk), tol) << loom::dtype_name(dtype);
  }
  const auto after = loom::cuda::cudnn_attention_status();
  EXPECT_EQ(after.forward_runs, before.forward_runs);
  EXPECT_EQ(after.backward_runs, before.backward_runs);
}

}  // namespace
