// The experts' mixture against its definition, computed here from the parts: the router's
// weights (softmax of its logits in float64; top-1 one-hot; top-2 its two largest renormalised)
// and the velocity as the weighted sum of each expert's own velocity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/dit_experts.h"

namespace loom::train {
namespace {

models::VitConfig router_config(bool labels) {
  models::VitConfig c;
  c.image_size = 8;
  c.patch = 4;
  c.width = 16;
  c.depth = 1;
  c.heads = 2;
  c.num_classes = 3;
  c.time_conditioning = true;
  c.label_classes = labels ? 10 : 0;  // told the class being sampled (10: none, as the DiT's)
  return c;
}

Experts tiny_experts(bool labels = false) {
  Experts e;
  e.router = std::make_unique<models::Vit>(router_config(labels));
  e.router->init_parameters(1);
  e.dit = {.image_size = 8, .patch = 4, .width = 16, .depth = 1, .heads = 2};
  for (int k = 0; k < 3; ++k) {
    e.experts.push_back(std::make_unique<models::Dit>(e.dit));
    e.experts.back()->init_parameters(uint64_t(10 + k));
  }
  return e;
}

struct Inputs {
  Tensor x, t, y;
};
Inputs inputs() {
  return {randn({5, 1, 8, 8}, RngKey{2, "experts_test", "x"}),
          from_vector(std::vector<float>{0.05f, 0.3f, 0.5f, 0.7f, 0.95f}, {5}),
          from_vector(std::vector<int64_t>{0, 3, 7, 9, 10}, {5})};  // 10: the null class
}

TEST(Experts, RoutingWeightsFromTheRoutersLogits) {
  const Experts e = tiny_experts();
  const Inputs in = inputs();
  NoGradGuard no_grad;
  const std::vector<float> logits = to_vector(e.router->forward(in.x, in.t));
  const int64_t K = 3;
  for (Routing r : {Routing::Full, Routing::Top1, Routing::Top2}) {
    const std::vector<float> w = to_vector(routing_weights(*e.router, in.x, in.t, in.y, r));
    for (int64_t b = 0; b < 5; ++b) {
      std::vector<double> p(3);
      double z = 0, m = -1e300;
      for (int64_t k = 0; k < K; ++k) m = std::max(m, double(logits[size_t(b * K + k)]));
      for (int64_t k = 0; k < K; ++k) z += p[size_t(k)] = std::exp(logits[size_t(b * K + k)] - m);
      for (double& v : p) v /= z;
      std::vector<int64_t> order = {0, 1, 2};
      std::sort(order.begin(), order.end(),
                [&](int64_t a, int64_t c) { return p[size_t(a)] > p[size_t(c)]; });
      for (int64_t k = 0; k < K; ++k) {
        double want = p[size_t(k)];
        if (r == Routing::Top1) want = k == order[0] ? 1.0 : 0.0;
        if (r == Routing::Top2)
          want = k == order[2] ? 0.0 : p[size_t(k)] / (p[size_t(order[0])] + p[size_t(order[1])]);
        EXPECT_NEAR(w[size_t(b * K + k)], want, 1e-6)
            << name_of(r) << " sample " << b << " expert " << k;
      }
    }
  }
}

TEST(Experts, MixtureIsTheWeightedSumOfTheExpertsVelocities) {
  for (bool labels : {false, true}) {
    const Experts e = tiny_experts(labels);
    const Inputs in = inputs();
    NoGradGuard no_grad;
    for (Routing r : {Routing::Full, Routing::Top2}) {
      const std::vector<float> got = to_vector(mixture_velocity(e, r)(in.x, in.t, in.y));
      const std::vector<float> w = to_vector(routing_weights(*e.router, in.x, in.t, in.y, r));
      std::vector<double> want(got.size(), 0.0);
      const int64_t per = int64_t(got.size()) / 5;
      for (int64_t k = 0; k < 3; ++k) {
        const std::vector<float> vk = to_vector(e.experts[size_t(k)]->forward(in.x, in.t, in.y));
        for (int64_t b = 0; b < 5; ++b)
          for (int64_t i = 0; i < per; ++i)
            want[size_t(b * per + i)] += double(w[size_t(b * 3 + k)]) * vk[size_t(b * per + i)];
      }
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i])))
            << name_of(r) << " element " << i;
    }
  }
  EXPECT_THROW(routing_from_name("top3"), Error);
}

}  // namespace
}  // namespace loom::train
