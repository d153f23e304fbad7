// Mixed precision (AutocastGuard(BF16)): linear and attention compute on bf16 copies of their
// f32 operands with f32 accumulation and f32 results; gradients and parameters stay f32; the
// mode does not leak into backward or into code outside the guard.
//
// Reference: float64 products of the bf16-rounded operands (what the kernel multiplies), so
// only f32 accumulation separates the two: a K-term sum is within K * 2^-24 * sum|a b| of
// exact, checked against 4x that plus 1e-7.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/core/dtype.h"
#include "loom/nn/layers.h"
#include "loom/ops/linear_quantizer.h"
#include "loom/ops/ops.h"

namespace loom {
namespace {

double bf16_round(float x) {
  return double(to_f32(to_bf16(x)));
}

Tensor random_tensor(const Shape& shape, const char* name) {
  Tensor t = randn(shape, RngKey{7, "autocast_test", name});
  t.set_requires_grad(true);
  return t;
}

// (M, K) @ (N, K)^T in float64 on bf16-rounded values; err: the f32 accumulation bound.
void reference_product(const std::vector<float>& a, const std::vector<float>& b, int64_t M,
                       int64_t N, int64_t K, std::vector<double>& out, std::vector<double>& err) {
  out.assign(size_t(M * N), 0.0);
  err.assign(size_t(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = bf16_round(a[size_t(m * K + k)]) * bf16_round(b[size_t(n * K + k)]);
        s += p;
        mag += std::fabs(p);
      }
      out[size_t(m * N + n)] = s;
      err[size_t(m * N + n)] = 4.0 * double(K) * std::ldexp(1.0, -24) * mag + 1e-7;
    }
}

std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = v[size_t(r * cols + c)];
  return t;
}

TEST(Autocast, LinearForwardAndBackwardOnBf16Operands) {
  const int64_t M = 6, K = 40, N = 5;
  Tensor x = random_tensor({M, K}, "x"), w = random_tensor({N, K}, "w");
  Tensor y, g = randn({M, N}, RngKey{7, "autocast_test", "g"});
  {
    AutocastGuard autocast(DType::BF16);
    y = linear(x, w);
    backward(y, g);
  }
  ASSERT_EQ(y.dtype(), DType::F32);
  ASSERT_EQ(x.grad().dtype(), DType::F32);
  ASSERT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_EQ(w.dtype(), DType::F32);  // master weights untouched

  const std::vector<float> xv = to_vector(x), wv = to_vector(w), gv = to_vector(g);
  std::vector<double> ref, err;
  reference_product(xv, wv, M, N, K, ref, err);
  const std::vector<float> yv = to_vector(y);
  bool differs_from_f32 = false;
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(yv[i], ref[i], err[i]) << "y " << i;
  // f32 inputs give a different product: the rounding to bf16 really happened.
  {
    Tensor y32 = linear(x.detach(), w.detach());
    const std::vector<float> y32v = to_vector(y32);
    for (size_t i = 0; i < ref.size(); ++i) differs_from_f32 |= std::fabs(y32v[i] - yv[i]) > 1e-5;
  }
  EXPECT_TRUE(differs_from_f32);
  // dx = g @ w (K-sum over N): as (M, N) @ (K, N)^T; dw = g^T @ x: as (N, M) @ (K, M)^T.
  reference_product(gv, transposed(wv, N, K), M, K, N, ref, err);
  const std::vector<float> gx = to_vector(x.grad());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(gx[i], ref[i], err[i]) << "dx " << i;
  reference_product(transposed(gv, M, N), transposed(xv, M, K), N, K, M, ref, err);
  const std::vector<float> gw = to_vector(w.grad());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(gw[i], ref[i], err[i]) << "dw " << i;
}

// A parameter's bf16 copy is made once per bf16 region and reused; values written to the
// parameter between regions (the optimizer's step) reach the next region's products.
TEST(Autocast, ParameterCopyLastsOneRegionAndSeesUpdatesBetweenRegions) {
  const int64_t M = 4, K = 24, N = 3;
  Tensor x = randn({M, K}, RngKey{7, "autocast_test", "xr"}), w = random_tensor({N, K}, "wr");
  Tensor activation = randn({M, K}, RngKey{7, "autocast_test", "act"});
  std::vector<double> ref, err;
  for (int region = 0; region < 2; ++region) {
    if (region == 1) fill_uniform(w, RngKey{7, "autocast_test", "update"}, 0, -1.0f, 1.0f);
    AutocastGuard autocast(DType::BF16);
    const Tensor copy = bf16_copy_of(w);
    EXPECT_TRUE(copy.is_same(bf16_copy_of(w)));  // one copy for every use in the region
    EXPECT_FALSE(bf16_copy_of(activation).is_same(bf16_copy_of(activation)));  // not a parameter
    {
      AutocastGuard exact(DType::F32);  // as the engine's backward: the region stays open
      EXPECT_TRUE(copy.is_same(bf16_copy_of(w)));
    }
    const std::vector<float> yv = to_vector(linear(x, w));
    reference_product(to_vector(x), to_vector(w), M, N, K, ref, err);
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(yv[i], ref[i], err[i]) << region << " " << i;
    forget_bf16_copy(w);  // ZeRO-3 frees a gathered parameter: its copy goes with it
    EXPECT_FALSE(copy.is_same(bf16_copy_of(w)));
  }
  // Outside any region nothing is kept.
  EXPECT_FALSE(bf16_copy_of(w).is_same(bf16_copy_of(w)));
}

TEST(Autocast, LinearBiasGradientIsTheF32Sum) {
  // The bias gradient sums the f32 incoming gradient (not its bf16 rounding) and stays f32.
  Tensor x = random_tensor({5, 8}, "xb"), w = random_tensor({3, 8}, "wb"),
         b = random_tensor({3}, "b");
  Tensor g = randn({5, 3}, RngKey{7, "autocast_test", "gb"});
  {
    AutocastGuard autocast(DType::BF16);
    backward(linear(x, w, b), g);
  }
  ASSERT_EQ(b.grad().dtype(), DType::F32);
  const std::vector<float> gv = to_vector(g), gb = to_vector(b.grad());
  for (int64_t n = 0; n < 3; ++n) {
    double s = 0;
    for (int64_t m = 0; m < 5; ++m) s += gv[size_t(m * 3 + n)];
    EXPECT_NEAR(gb[size_t(n)], s, 1e-6) << n;
  }
}

// linear_gelu's bias gradient under autocast also sums f32 values: those of g * gelu'(pre)
// before they are rounded to bf16 for the two gradient products. Reference: pre from float64
// products of the bf16 operands plus the bias; bound 2e-5 of the column's sum of |terms| (the
// kernel's f32 GELU derivative is within 1e-5 of float64), which a sum of the bf16-rounded
// terms misses (checked).
TEST(Autocast, LinearGeluBiasGradientIsTheF32Sum) {
  const int64_t M = 64, K = 16, N = 8;
  Tensor x = random_tensor({M, K}, "xg"), w = random_tensor({N, K}, "wg"),
         b = random_tensor({N}, "bg");
  Tensor g = randn({M, N}, RngKey{7, "autocast_test", "gg"});
  {
    AutocastGuard autocast(DType::BF16);
    backward(linear_gelu(x, w, b), g);
  }
  ASSERT_EQ(b.grad().dtype(), DType::F32);
  std::vector<double> pre, err;
  reference_product(to_vector(x), to_vector(w), M, N, K, pre, err);
  const std::vector<float> gv = to_vector(g), bv = to_vector(b), gb = to_vector(b.grad());
  double worst_bf16 = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    double s = 0, mag = 0, s_bf16 = 0;
    for (int64_t m = 0; m < M; ++m) {
      const double p = pre[size_t(m * N + n)] + bv[size_t(n)];
      const double kk = std::sqrt(2.0 / M_PI), t = std::tanh(kk * (p + 0.044715 * p * p * p));
      const double d = 0.5 * (1 + t) + 0.5 * p * (1 - t * t) * kk * (1 + 3 * 0.044715 * p * p);
      const double term = gv[size_t(m * N + n)] * d;
      s += term;
      mag += std::fabs(term);
      s_bf16 += bf16_round(float(term));
    }
    EXPECT_NEAR(gb[size_t(n)], s, 2e-5 * mag) << n;
    worst_bf16 = std::max(worst_bf16, std::fabs(s_bf16 - s) / (2e-5 * mag));
  }
  EXPECT_GT(worst_bf16, 2.0);  // the bound separates the two sums
}

TEST(Autocast, AttentionRunsInBf16AndReturnsF32) {
  Tensor q = random_tensor({2, 2, 7, 8}, "q"), k = random_tensor({2, 2, 7, 8}, "k"),
         v = random_tensor({2, 2, 7, 8}, "v");
  Tensor out16, out32 = scaled_dot_product_attention(q, k, v, Tensor(), true);
  {
    AutocastGuard autocast(DType::BF16);
    out16 = scaled_dot_product_attention(q, k, v, Tensor(), true);
  }
  ASSERT_EQ(out16.dtype(), DType::F32);
  backward(sum(out16));
  ASSERT_EQ(q.grad().dtype(), DType::F32);
  const std::vector<float> a = to_vector(out16), b = to_vector(out32);
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, double(std::fabs(a[i] - b[i])));
  EXPECT_GT(max_diff, 0.0);   // bf16 inputs change the result...
  EXPECT_LT(max_diff, 3e-2);  // ...by about their rounding (2^-9 relative, outputs ~1)
}

// Attention's projections with q, k and v kept in bf16 (the qkv linear's AutocastOutput::
// Compute, as nn::Attention does): the kernel then reads the projection's bf16 output as it
// is, and its bf16 output and gradients pass to the projections without a widening copy. Every
// value is the one the f32 route (Wide) rounds to bf16 on the way, so the output and every
// gradient must be bit for bit the f32 route's, with or without a causal mask.
TEST(Autocast, AttentionProjectionsInBf16GiveTheF32RoutesBits) {
  const int64_t B = 2, T = 9, H = 2, D = 8, C = H * D;
  for (bool causal : {false, true}) {
    struct Run {
      Tensor out, qkv_out, attended;
      std::vector<float> grads[5];
    };
    auto run = [&](AutocastOutput qkv_output) {
      Tensor x = random_tensor({B, T, C}, "attn_x"), wqkv = random_tensor({3 * C, C}, "wqkv"),
             bqkv = random_tensor({3 * C}, "bqkv"), wproj = random_tensor({C, C}, "wproj"),
             bproj = random_tensor({C}, "bproj");
      Run r;
      {
        AutocastGuard autocast(DType::BF16);
        r.qkv_out = linear(x, wqkv, bqkv, qkv_output);  // (B, T, 3C)
        auto parts = split(r.qkv_out, std::vector<int64_t>{C, C, C}, -1);
        auto heads = [&](const Tensor& t) {
          return permute(reshape(t, {B, T, H, D}), {0, 2, 1, 3});
        };
        r.attended = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                                  Tensor(), causal);
        r.out = linear(reshape(permute(r.attended, {0, 2, 1, 3}), {B, T, C}), wproj, bproj);
      }
      backward(r.out, randn({B, T, C}, RngKey{7, "autocast_test", "attn_g"}));
      const Tensor* leaves[5] = {&x, &wqkv, &bqkv, &wproj, &bproj};
      for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(leaves[i]->grad().dtype(), DType::F32);
        r.grads[i] = to_vector(leaves[i]->grad());
      }
      return r;
    };
    const Run wide = run(AutocastOutput::Wide), kept = run(AutocastOutput::Compute);
    EXPECT_EQ(wide.qkv_out.dtype(), DType::F32);
    EXPECT_EQ(wide.attended.dtype(), DType::F32);
    EXPECT_EQ(kept.qkv_out.dtype(), DType::BF16);
    EXPECT_EQ(kept.attended.dtype(), DType::BF16);
    EXPECT_EQ(kept.out.dtype(), DType::F32);
    EXPECT_EQ(to_vector(kept.out), to_vector(wide.out)) << "causal " << causal;
    const char* names[5] = {"x", "wqkv", "bqkv", "wproj", "bproj"};
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(kept.grads[i], wide.grads[i]) << names[i] << ", causal " << causal;
  }
}

// A bf16 input cannot enter a quantised layer (a recipe quantises f32 inputs), and a GELU
// layer has no bf16 output: one error each rather than another precision chosen silently.
TEST(Autocast, Bf16IntoAQuantisedLayerAndAGeluComputeOutputRefused) {
  struct Identity : LinearQuantizer {
    void quantize(GemmPass, Tensor&, GemmOperand, Tensor&, GemmOperand) override {}
    Tensor gemm(GemmPass, const Tensor&, GemmOperand, const Tensor&, GemmOperand,
                const Tensor&) override {
      return Tensor();
    }
  };
  const Tensor w = random_tensor({4, 8}, "wq");
  AutocastGuard autocast(DType::BF16);
  {
    LinearQuantizerScope scope(std::make_shared<Identity>());
    EXPECT_NO_THROW(linear(random_tensor({3, 8}, "xq"), w));
    try {
      linear(to_dtype(random_tensor({3, 8}, "xq"), DType::BF16), w);
      FAIL() << "a bf16 input into a quantised layer was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("recipe quantises f32 inputs"), std::string::npos)
          << e.what();
    }
  }
  nn::Linear fc(8, 4);
  fc.gelu = true;
  EXPECT_THROW(fc.forward(random_tensor({3, 8}, "xg2"), AutocastOutput::Compute), Error);
  EXPECT_EQ(fc.forward(random_tensor({3, 8}, "xg2")).dtype(), DType::F32);
}

TEST(Autocast, ModeIsScopedAndBackwardFollowsTheForward) {
  EXPECT_EQ(autocast_dtype(), DType::F32);
  Tensor x = random_tensor({3, 4}, "x2"), w = random_tensor({2, 4}, "w2");
  Tensor y;
  {
    AutocastGuard autocast(DType::BF16);
    EXPECT_EQ(autocast_dtype(), DType::BF16);
    y = linear(x, w);
  }
  EXPECT_EQ(autocast_dtype(), DType::F32);
  // A bf16 forward backpropagated outside the guard still uses bf16 operands: with a gradient
  // of ones, dx[m][k] = sum_n bf16(w[n][k]) exactly (2 terms, exact in f32).
  backward(sum(y));
  {
    const std::vector<float> wv = to_vector(w), gx = to_vector(x.grad());
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_EQ(double(gx[size_t(m * 4 + k)]),
                  bf16_round(wv[size_t(k)]) + bf16_round(wv[size_t(4 + k)]));
  }
  // An f32 forward backpropagated inside a bf16 guard stays exact f32.
  Tensor x2 = random_tensor({3, 4}, "x3");
  Tensor y2 = linear(x2, w.detach());
  {
    AutocastGuard autocast(DType::BF16);
    backward(sum(y2));
  }
  const std::vector<float> wv = to_vector(w), gx = to_vector(x2.grad());
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_FLOAT_EQ(gx[size_t(m * 4 + k)], wv[size_t(k)] + wv[size_t(4 + k)]);
  EXPECT_THROW(AutocastGuard(DType::F16), Error);
}

}  // namespace
}  // namespace loom
