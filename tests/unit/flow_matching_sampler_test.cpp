// The flow-matching sampler and guidance against exact answers (diffusion/flow_matching.h):
//  - a constant velocity c integrates from x(1) to exactly x(1) - c, with Euler and Heun, on a
//    uniform and a shifted time grid (the steps' lengths sum to 1 whatever the grid);
//  - Gaussian data N(mu, sigma^2): the optimal flow-matching velocity is known in closed form,
//    and its flow carries each noise sample z to exactly mu + sigma z (the velocity is affine in
//    x, so the flow map is the increasing affine map between N(0, 1) and N(mu, sigma^2)); the
//    real sampler, fed that velocity, lands there to the discretisation's error, which falls
//    as Euler's first order and Heun's second order say, and its samples' mean and variance
//    match mu and sigma^2;
//  - classifier-free guidance with a constant velocity per label gives exactly
//    v_u + s (v_c - v_u) (not the branches swapped);
//  - the SD3 timestep shift: its closed form, and the training times it shifts.
// The references are computed here in float64 from the formulas, not by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/core/rng.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/ops/ops.h"

namespace loom::diffusion {
namespace {

constexpr uint64_t kSeed = 17;

// The sampler's starting noise x(1), drawn as it draws it.
std::vector<float> start_noise(const Shape& shape) {
  return to_vector(randn(shape, RngKey{kSeed, "sample.noise", ""}));
}

double shifted(double t, double s) {  // SD3's shift, written out here
  return s * t / (1 + (s - 1) * t);
}

TEST(FlowSampler, ConstantVelocityEndsExactlyOneVelocityAway) {
  const Shape shape{3, 2, 2, 2};
  const std::vector<float> x1 = start_noise(shape);
  const Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2}, {3});
  // v: a different constant per element (0.3 + 0.1 i).
  std::vector<float> c(x1.size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = 0.3f + 0.1f * float(i);
  const VelocityFn constant = [&](const Tensor&, const Tensor&, const Tensor&) {
    return from_vector(c, shape);
  };
  for (bool heun : {false, true})
    for (double shift : {1.0, 3.0})
      for (int64_t steps : {1, 7, 50}) {
        const std::vector<float> x0 =
            to_vector(sample(constant, shape, labels, {steps, heun, 1.0, 10, shift}, kSeed));
        for (size_t i = 0; i < x0.size(); ++i)
          ASSERT_NEAR(x0[i], double(x1[i]) - c[i], 3e-5)  // f32 sums of up to 50 steps
              << (heun ? "Heun" : "Euler") << ", shift " << shift << ", " << steps
              << " steps, element " << i;
      }
}

// x_t = (1 - t) x0 + t eps, x0 ~ N(mu, sigma^2), eps ~ N(0, 1): with a = 1 - t, b = t,
//   E[eps | x_t = x] = b (x - a mu) / (a^2 sigma^2 + b^2),
//   E[x0 | x_t = x] = mu + a sigma^2 (x - a mu) / (a^2 sigma^2 + b^2),
// and the optimal velocity is their difference, E[eps - x0 | x].
double optimal_velocity(double x, double t, double mu, double sigma) {
  const double a = 1 - t, b = t, var = a * a * sigma * sigma + b * b;
  return (b - a * sigma * sigma) * (x - a * mu) / var - mu;
}

TEST(FlowSampler, GaussianDataComesOutAsTheExactFlowMapSays) {
  const int64_t B = 4096;
  const Shape shape{B, 2, 1, 1};  // channel 0: N(0.7, 0.3^2), channel 1: N(-1.5, 2^2)
  const double mu[2] = {0.7, -1.5}, sigma[2] = {0.3, 2.0};
  const VelocityFn velocity = [&](const Tensor& xt, const Tensor& t, const Tensor&) {
    const std::vector<float> x = to_vector(xt), tt = to_vector(t);
    std::vector<float> v(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t ch = i % 2;
      v[i] = float(optimal_velocity(x[i], tt[i / 2], mu[ch], sigma[ch]));
    }
    return from_vector(v, xt.shape());
  };
  const std::vector<float> z = start_noise(shape);
  const Tensor labels = zeros({B}, DType::I64);
  // The worst per-sample distance from mu + sigma z, relative to sigma, and the samples' mean
  // and variance per channel.
  struct Run {
    double worst = 0, mean[2] = {0, 0}, var[2] = {0, 0};
  };
  auto run = [&](bool heun, int64_t steps, double shift) {
    const std::vector<float> x0 =
        to_vector(sample(velocity, shape, labels, {steps, heun, 1.0, 10, shift}, kSeed));
    Run r;
    for (size_t i = 0; i < x0.size(); ++i) {
      const size_t ch = i % 2;
      r.worst = std::max(r.worst, std::abs(x0[i] - (mu[ch] + sigma[ch] * z[i])) / sigma[ch]);
      r.mean[ch] += x0[i] / double(B);
      r.var[ch] += double(x0[i]) * x0[i] / double(B);
    }
    for (int ch = 0; ch < 2; ++ch) r.var[ch] -= r.mean[ch] * r.mean[ch];
    return r;
  };
  // The error halves with twice the steps under Euler (first order) and quarters under Heun
  // (second order; measured ratios 1.99 and 4.0-4.06 on both grids), and at 200 steps is within
  // the bounds (measured: Euler 3.8e-2 uniform, 8.7e-2 shift 3; Heun 4.1e-4, 4.5e-3).
  struct Case {
    bool heun;
    double shift, order, bound;
  };
  for (const Case& k : {Case{false, 1.0, 2.0, 5e-2}, Case{false, 3.0, 2.0, 1.2e-1},
                        Case{true, 1.0, 4.0, 1e-3}, Case{true, 3.0, 4.0, 1e-2}}) {
    const std::string what =
        std::string(k.heun ? "Heun" : "Euler") + ", shift " + std::to_string(k.shift);
    const Run coarse = run(k.heun, 100, k.shift), fine = run(k.heun, 200, k.shift);
    EXPECT_NEAR(coarse.worst / fine.worst, k.order, 0.15 * k.order) << what;
    EXPECT_LT(fine.worst, k.bound) << what;
    // The samples' moments: within 4 standard errors of mu and sigma^2 (plus the bound).
    for (int ch = 0; ch < 2; ++ch) {
      const double s2 = sigma[ch] * sigma[ch];
      EXPECT_NEAR(fine.mean[ch], mu[ch], 4 * sigma[ch] / std::sqrt(double(B)) + k.bound * sigma[ch])
          << what << ", channel " << ch;
      EXPECT_NEAR(fine.var[ch], s2, 4 * s2 * std::sqrt(2.0 / double(B)) + 2 * k.bound * s2)
          << what << ", channel " << ch;
    }
  }
}

TEST(FlowSampler, GuidanceIsUnconditionalPlusScaleTimesTheDifference) {
  const Shape shape{3, 1, 2, 2};
  const int64_t null_class = 10;
  const std::vector<int64_t> y = {0, 3, 9};
  auto v_of = [&](int64_t label) { return label == null_class ? -0.4 : 0.1 * double(label + 1); };
  const VelocityFn per_label = [&](const Tensor& xt, const Tensor&, const Tensor& labels) {
    const std::vector<int64_t> l = to_vector_i64(labels);
    const int64_t per = xt.numel() / xt.size(0);
    std::vector<float> v;
    for (int64_t label : l) v.insert(v.end(), size_t(per), float(v_of(label)));
    return from_vector(v, xt.shape());
  };
  const std::vector<float> x1 = start_noise(shape);
  for (double scale : {2.5, 0.0, -1.0})
    for (bool heun : {false, true}) {
      const std::vector<float> x0 = to_vector(
          sample(per_label, shape, from_vector(y, {3}), {8, heun, scale, null_class, 1.0}, kSeed));
      for (size_t i = 0; i < x0.size(); ++i) {
        const double vc = v_of(y[i / 4]), vu = v_of(null_class);
        ASSERT_NEAR(x0[i], x1[i] - (vu + scale * (vc - vu)), 2e-6)
            << "scale " << scale << (heun ? ", Heun" : ", Euler") << ", element " << i;
      }
    }
}

TEST(FlowSampler, TimeShiftIsSD3sMapAndShiftsTheTrainingTimes) {
  for (double s : {0.5, 1.0, 3.0})
    for (double t : {0.0, 0.1, 0.5, 0.9, 1.0}) EXPECT_NEAR(shift_time(t, s), shifted(t, s), 1e-15);
  EXPECT_DOUBLE_EQ(shift_time(0.5, 3.0), 0.75);
  // The training times: the draws a run without the shift makes, then shifted.
  const Tensor x0 = zeros({64, 1, 2, 2});
  const Tensor labels = zeros({64}, DType::I64);
  for (bool uniform : {true, false}) {
    FlowMatchingConfig plain;
    plain.uniform_t = uniform;
    FlowMatchingConfig shifted_config = plain;
    shifted_config.shift = 3.0;
    const std::vector<float> t = to_vector(flow_matching_batch(x0, labels, plain, 5, 2).t);
    const std::vector<float> ts =
        to_vector(flow_matching_batch(x0, labels, shifted_config, 5, 2).t);
    for (size_t i = 0; i < t.size(); ++i) ASSERT_NEAR(ts[i], shifted(t[i], 3.0), 1e-6) << i;
  }
}

}  // namespace
}  // namespace loom::diffusion
