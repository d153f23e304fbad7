// Diffusion-DPO's loss (diffusion/preference.h) against a float64 reference written here from
// the paper's formula: for each pair the flow-matching errors of the model and of the frozen
// reference on the winner and the loser, at the same time, noise and caption dropout, and
// -log sigmoid(-beta ((e_w - e_w_ref) - (e_l - e_l_ref))) averaged over the pairs; its
// gradient against central differences of that reference; the draws a pair shares; its
// direction (a step down its gradient lowers the reference loss); and softplus where exp
// overflows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/core/rng.h"
#include "loom/diffusion/preference.h"
#include "loom/ops/ops.h"

namespace loom::diffusion {
namespace {

constexpr uint64_t kSeed = 5;
constexpr int64_t kStep = 3, kFirst = 11, kPairs = 6;
const Shape kShape{kPairs, 1, 2, 3};

struct Toy {
  Tensor winners = randn(kShape, RngKey{1, "test", "winners"});
  Tensor losers = randn(kShape, RngKey{1, "test", "losers"});
  Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2, 3, 1, 2}, {kPairs});
  FlowMatchingConfig flow{.label_dropout = 0.3, .null_class = 4};
};

// v = a x + 0.1 label + t: the model's slope a a parameter, the reference's fixed.
VelocityFn affine(const Tensor& a) {
  return [a](const Tensor& x, const Tensor& t, const Tensor& y) {
    const int64_t B = x.size(0);
    const Tensor shift = add(mul_scalar(to_dtype(y, DType::F32), 0.1), t);  // (B)
    return add(mul(x, a), reshape(shift, {B, 1, 1, 1}));
  };
}

// The loss in float64 from the draws of both images (each flow_matching_batch's).
double reference_loss(const Toy& toy, double a, double a_ref, double beta) {
  const FlowMatchingBatch w =
      flow_matching_batch(toy.winners, toy.labels, toy.flow, kSeed, kStep, kFirst);
  const FlowMatchingBatch l =
      flow_matching_batch(toy.losers, toy.labels, toy.flow, kSeed, kStep, kFirst);
  auto error = [&](const FlowMatchingBatch& b, double slope, int64_t i) {
    const std::vector<float> xt = to_vector(b.xt), target = to_vector(b.target), t = to_vector(b.t);
    const std::vector<int64_t> y = to_vector_i64(b.labels);
    const int64_t n = b.xt.numel() / kPairs;
    double sum = 0;
    for (int64_t j = i * n; j < (i + 1) * n; ++j) {
      const double v = slope * xt[size_t(j)] + 0.1 * double(y[size_t(i)]) + t[size_t(i)];
      sum += (v - target[size_t(j)]) * (v - target[size_t(j)]);
    }
    return sum / double(n);
  };
  double loss = 0;
  for (int64_t i = 0; i < kPairs; ++i) {
    const double margin =
        (error(w, a, i) - error(w, a_ref, i)) - (error(l, a, i) - error(l, a_ref, i));
    loss += std::log1p(std::exp(beta * margin));
  }
  return loss / kPairs;
}

TEST(DiffusionDpo, LossAndGradientMatchFloat64) {
  const Toy toy;
  const double a_ref = 0.4, beta = 50;
  for (double a : {0.4, 0.55, -0.2}) {
    Tensor slope = from_vector(std::vector<float>{float(a)}, {1});
    slope.set_requires_grad(true);
    const Tensor loss = diffusion_dpo_loss(
        affine(slope), affine(from_vector(std::vector<float>{float(a_ref)}, {1})), toy.winners,
        toy.losers, toy.labels, toy.flow, beta, kSeed, kStep, kFirst);
    backward(loss);
    const double expected = reference_loss(toy, a, a_ref, beta);
    EXPECT_NEAR(item(loss), expected, 1e-5 * std::max(1.0, expected)) << "a = " << a;
    const double h = 1e-4;
    const double fd =
        (reference_loss(toy, a + h, a_ref, beta) - reference_loss(toy, a - h, a_ref, beta)) /
        (2 * h);
    EXPECT_NEAR(item(slope.grad()), fd, 2e-3 * std::max(1.0, std::abs(fd))) << "a = " << a;
  }
  // At the reference itself every margin is 0: log 2.
  EXPECT_NEAR(reference_loss(toy, a_ref, a_ref, beta), std::log(2.0), 1e-12);
}

TEST(DiffusionDpo, PairsShareTimesNoiseAndDroppedCaptions) {
  const Toy toy;
  const FlowMatchingBatch w =
      flow_matching_batch(toy.winners, toy.labels, toy.flow, kSeed, kStep, kFirst);
  const FlowMatchingBatch l =
      flow_matching_batch(toy.losers, toy.labels, toy.flow, kSeed, kStep, kFirst);
  EXPECT_EQ(to_vector(w.t), to_vector(l.t));
  EXPECT_EQ(to_vector_i64(w.labels), to_vector_i64(l.labels));
  // eps = target + x0, the same for both images of a pair.
  const std::vector<float> ew = to_vector(add(w.target, toy.winners)),
                           el = to_vector(add(l.target, toy.losers));
  for (size_t i = 0; i < ew.size(); ++i) ASSERT_NEAR(ew[i], el[i], 1e-6) << i;
}

// The sign: a small step down the loss's gradient lowers the float64 loss, from the reference's
// slope and from either side of it (with the margin's sign flipped it would raise it).
TEST(DiffusionDpo, StepDownTheGradientPrefersTheWinners) {
  const Toy toy;
  const double a_ref = 0.4, beta = 50;
  const Tensor reference = from_vector(std::vector<float>{float(a_ref)}, {1});
  for (double a : {0.4, 0.1, 0.8}) {
    Tensor slope = from_vector(std::vector<float>{float(a)}, {1});
    slope.set_requires_grad(true);
    const Tensor loss =
        diffusion_dpo_loss(affine(slope), affine(reference), toy.winners, toy.losers, toy.labels,
                           toy.flow, beta, kSeed, kStep, kFirst);
    backward(loss);
    const double stepped = a - 1e-3 * item(slope.grad());
    EXPECT_LT(reference_loss(toy, stepped, a_ref, beta), reference_loss(toy, a, a_ref, beta))
        << "a = " << a;
  }
}

TEST(Softplus, FiniteWhereExpOverflows) {
  Tensor x = from_vector(std::vector<float>{-100.f, -20.f, 0.f, 20.f, 100.f}, {5});
  x.set_requires_grad(true);
  const Tensor y = softplus(x);
  backward(sum(y));
  const std::vector<float> v = to_vector(y), g = to_vector(x.grad());
  const double expected[] = {std::exp(-100.0), std::log1p(std::exp(-20.0)), std::log(2.0),
                             20 + std::log1p(std::exp(-20.0)), 100};
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(v[i], expected[i], 1e-6 * std::max(1.0, expected[i])) << i;
    EXPECT_NEAR(g[i], 1 / (1 + std::exp(-double(to_vector(x)[i]))), 1e-6) << i;
  }
}

}  // namespace
}  // namespace loom::diffusion
