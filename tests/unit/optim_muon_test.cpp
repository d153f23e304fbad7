// Muon (optim/muon.h, AdamWConfig::muon): the Newton-Schulz orthogonalisation against the same
// quintic iteration written out in float64, and against a matrix whose singular vectors are
// known (U^T O V must come out diagonal with entries near 1); the optimizer's step against Muon
// written out in float64 for the blocks' matrices, and AdamW's own step for everything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"
#include "loom/optim/muon.h"

namespace loom::optim {
namespace {

using M = std::vector<std::vector<double>>;  // row-major float64 matrices

M zeros64(size_t r, size_t c) {
  return M(r, std::vector<double>(c, 0.0));
}
M mm(const M& a, const M& b) {
  M o = zeros64(a.size(), b[0].size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < b.size(); ++k)
      for (size_t j = 0; j < b[0].size(); ++j) o[i][j] += a[i][k] * b[k][j];
  return o;
}
M tr(const M& a) {
  M o = zeros64(a[0].size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[0].size(); ++j) o[j][i] = a[i][j];
  return o;
}

// Jordan's iteration in float64: X = G / |G|_F (wide orientation), then X <- a X + (b A + c A^2) X
// with A = X X^T.
M newton_schulz64(M g, int steps) {
  const bool tall = g.size() > g[0].size();
  if (tall) g = tr(g);
  double norm = 0;
  for (auto& row : g)
    for (double v : row) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  for (auto& row : g)
    for (double& v : row) v /= norm;
  for (int s = 0; s < steps; ++s) {
    const M A = mm(g, tr(g)), A2 = mm(A, A);
    M B = zeros64(A.size(), A.size());
    for (size_t i = 0; i < A.size(); ++i)
      for (size_t j = 0; j < A.size(); ++j) B[i][j] = -4.7750 * A[i][j] + 2.0315 * A2[i][j];
    const M BX = mm(B, g);
    for (size_t i = 0; i < g.size(); ++i)
      for (size_t j = 0; j < g[0].size(); ++j) g[i][j] = 3.4445 * g[i][j] + BX[i][j];
  }
  return tall ? tr(g) : g;
}

M random64(size_t r, size_t c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  M o = zeros64(r, c);
  for (auto& row : o)
    for (double& v : row) v = n(gen);
  return o;
}

Tensor tensor_of(const M& m) {
  std::vector<float> v;
  for (const auto& row : m) v.insert(v.end(), row.begin(), row.end());
  return from_vector(v, {int64_t(m.size()), int64_t(m[0].size())});
}

M matrix_of(const Tensor& t) {
  const std::vector<double> v = to_vector_f64(t);
  M o = zeros64(size_t(t.size(0)), size_t(t.size(1)));
  for (size_t i = 0; i < o.size(); ++i)
    for (size_t j = 0; j < o[0].size(); ++j) o[i][j] = v[i * o[0].size() + j];
  return o;
}

double max_diff(const M& a, const M& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[0].size(); ++j) d = std::max(d, std::abs(a[i][j] - b[i][j]));
  return d;
}

// An orthogonal n x n matrix: a product of Givens rotations at random angles.
M orthogonal64(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> angle(0.0, 6.283185307179586);
  M q = zeros64(n, n);
  for (size_t i = 0; i < n; ++i) q[i][i] = 1;
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) {
        const double t = angle(gen), c = std::cos(t), s = std::sin(t);
        for (size_t k = 0; k < n; ++k) {
          const double a = q[k][i], b = q[k][j];
          q[k][i] = c * a - s * b;
          q[k][j] = s * a + c * b;
        }
      }
  return q;
}

TEST(Muon, NewtonSchulzIsJordansIterationInFloat64) {
  for (auto [r, c] : {std::pair{8, 20}, {20, 8}, {16, 16}}) {
    SCOPED_TRACE(std::to_string(r) + " x " + std::to_string(c));
    const M g = random64(size_t(r), size_t(c), 3);
    const M want = newton_schulz64(g, 5);
    const M got = matrix_of(newton_schulz_orthogonalize(tensor_of(g), 5));
    EXPECT_LE(max_diff(got, want), 2e-5);
  }
}

// G = U S V^T with singular values from 0.05 to 1 (x 7): U^T O V is diagonal, each entry in
// [0.6, 1.25] (the iteration's fixed band, not exactly 1).
TEST(Muon, NewtonSchulzKeepsSingularVectorsAndBringsValuesNearOne) {
  const size_t r = 6, c = 10;
  const M U = orthogonal64(r, 4), V = orthogonal64(c, 5);
  M S = zeros64(r, c);
  const double values[] = {1.0, 0.6, 0.3, 0.2, 0.1, 0.05};
  for (size_t i = 0; i < r; ++i) S[i][i] = 7.0 * values[i];
  const M g = mm(mm(U, S), tr(V));
  const M core = mm(mm(tr(U), matrix_of(newton_schulz_orthogonalize(tensor_of(g), 5))), V);
  for (size_t i = 0; i < r; ++i)
    for (size_t j = 0; j < c; ++j) {
      if (i == j) {
        EXPECT_GE(core[i][j], 0.6) << "singular value " << i;
        EXPECT_LE(core[i][j], 1.25) << "singular value " << i;
      } else {
        EXPECT_NEAR(core[i][j], 0.0, 1e-4) << i << ", " << j;
      }
    }
}

TEST(Muon, OnlyTheBlocksLinearWeights) {
  const loom::Shape m = {4, 4}, v = {4};
  EXPECT_TRUE(muon_updates("blocks.0.attn.qkv.weight", m));
  EXPECT_TRUE(muon_updates("blocks.3.mlp.w2.weight", m));
  EXPECT_FALSE(muon_updates("blocks.0.attn.qkv.bias", v));
  EXPECT_FALSE(muon_updates("blocks.0.norm1.weight", v));
  EXPECT_FALSE(muon_updates("blocks.0.ssm.conv_weight", m));
  EXPECT_FALSE(muon_updates("tok_embed.weight", m));
  EXPECT_FALSE(muon_updates("lm_head.weight", m));
}

// Two steps of the optimizer with Muon on: the block matrix follows Muon written out in float64
// (Nesterov momentum 0.9, orthogonalised, scaled 0.2 sqrt(max(rows, cols)), decoupled decay);
// the embedding and the bias take exactly AdamW's update (a second optimizer without Muon).
TEST(Muon, StepsTheBlocksMatricesAndLeavesTheRestToAdamW) {
  const int64_t r = 6, c = 9;
  const AdamWConfig plain{
      .lr = 0.02, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  AdamWConfig with_muon = plain;
  with_muon.muon = true;
  with_muon.muon_momentum = 0.9;
  auto make = [&] {
    std::vector<Tensor> ts = {randn({r, c}, RngKey{7, "muon_test", "w"}),
                              randn({5, 3}, RngKey{7, "muon_test", "e"}),
                              randn({c}, RngKey{7, "muon_test", "b"})};
    for (auto& t : ts) t.set_requires_grad(true);
    return ts;
  };
  std::vector<Tensor> a = make(), b = make();
  AdamW muon({{"blocks.0.fc.weight", a[0], true},
              {"tok_embed.weight", a[1], false},
              {"blocks.0.fc.bias", a[2], false}},
             with_muon);
  AdamW adamw({{"blocks.0.fc.weight", b[0], true},
               {"tok_embed.weight", b[1], false},
               {"blocks.0.fc.bias", b[2], false}},
              plain);
  M w = matrix_of(a[0]), m = zeros64(size_t(r), size_t(c));
  for (int step = 0; step < 2; ++step) {
    const std::string n = std::to_string(step);
    for (size_t k = 0; k < 3; ++k) {
      const Tensor g = randn(a[k].shape(), RngKey{7, "muon_test", "g" + n + std::to_string(k)});
      a[k].set_grad(contiguous(g));
      b[k].set_grad(contiguous(g));
    }
    const M g = matrix_of(a[0].grad());
    muon.step(0.02);
    adamw.step(0.02);
    M ahead = zeros64(size_t(r), size_t(c));
    for (size_t i = 0; i < size_t(r); ++i)
      for (size_t j = 0; j < size_t(c); ++j) {
        m[i][j] = 0.9 * m[i][j] + g[i][j];
        ahead[i][j] = g[i][j] + 0.9 * m[i][j];
      }
    const M o = newton_schulz64(ahead, 5);
    const double scale = 0.2 * std::sqrt(double(std::max(r, c)));
    for (size_t i = 0; i < size_t(r); ++i)
      for (size_t j = 0; j < size_t(c); ++j)
        w[i][j] = w[i][j] * (1 - 0.02 * 0.1) - 0.02 * scale * o[i][j];
    EXPECT_LE(max_diff(matrix_of(a[0]), w), 1e-5) << "step " << step;
    EXPECT_EQ(to_vector(a[1]), to_vector(b[1])) << "step " << step;
    EXPECT_EQ(to_vector(a[2]), to_vector(b[2])) << "step " << step;
  }
  EXPECT_NE(to_vector(a[0]), to_vector(b[0]));  // the matrix did not take AdamW's step
}

}  // namespace
}  // namespace loom::optim
