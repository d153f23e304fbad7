// The mixture-of-experts layer (nn/moe.h) against its definition, computed here in float64
// from its parameters with plain loops: the chosen experts, the gates, each expert's MLP. Also
// what the reference model test (tests/reference/gpt_reference.py) cannot see: dropless
// routing of every token to one expert, the selection bias choosing but never weighing, which
// forwards the balancing statistics count, the bias update's sign rule, finite differences
// through the whole layer and the bad configurations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "expect_error.h"
#include "loom/nn/moe.h"
#include "loom/ops/ops.h"

namespace loom::nn {
namespace {

constexpr int64_t kDim = 6, kTokens = 9;

MoeConfig small_config(bool swiglu, MoeGating gating = MoeGating::Softmax) {
  MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.hidden = 5;
  c.swiglu = swiglu;
  c.gating = gating;
  c.aux_loss = 0.01;
  c.z_loss = 0.001;
  return c;
}

std::unique_ptr<MoE> make_moe(const MoeConfig& c, uint64_t seed = 3) {
  auto m = std::make_unique<MoE>(kDim, c, Init::normal(0.5f));  // large: routes differ
  m->init_parameters(seed);
  return m;
}

Tensor random_input(uint64_t seed) {
  Tensor x = Tensor::empty({kTokens, kDim});
  fill_normal(x, RngKey{seed, "moe_test", "x"}, 0, 0.0f, 1.0f);
  return x;
}

std::vector<double> as_double(const Tensor& t) {
  const std::vector<float> v = to_vector(t);
  return {v.begin(), v.end()};
}

// The layer's output for x (N, C), in float64 from the parameters: router scores, the top k
// by score + bias (ties to the lower index), gates renormalised, sum of gate * expert MLP.
std::vector<double> reference_output(const MoE& m, const Tensor& x, std::vector<int64_t>* load) {
  const MoeConfig& c = m.config;
  const int64_t E = c.experts, H = c.hidden, C = kDim;
  const auto X = as_double(x), R = as_double(m.router->weight), W1 = as_double(m.w1),
             W2 = as_double(m.w2);
  const std::vector<double> W3 = c.swiglu ? as_double(m.w3) : std::vector<double>();
  std::vector<double> out(size_t(kTokens * C), 0.0);
  if (load) load->assign(size_t(E), 0);
  for (int64_t n = 0; n < kTokens; ++n) {
    const double* xn = &X[size_t(n * C)];
    std::vector<double> s(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t i = 0; i < C; ++i) l += R[size_t(e * C + i)] * xn[i];
      s[size_t(e)] = l;
    }
    if (c.gating == MoeGating::Softmax) {
      const double mx = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - mx));
      for (double& v : s) v /= z;
    } else {
      for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
    }
    std::vector<int64_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      return s[size_t(a)] + m.selection_bias[size_t(a)] >
             s[size_t(b)] + m.selection_bias[size_t(b)];
    });
    double gate_sum = 0;
    for (int64_t j = 0; j < c.top_k; ++j) gate_sum += s[size_t(idx[size_t(j)])];
    for (int64_t j = 0; j < c.top_k; ++j) {
      const int64_t e = idx[size_t(j)];
      if (load) ++(*load)[size_t(e)];
      const double gate = s[size_t(e)] / gate_sum;
      std::vector<double> h(static_cast<size_t>(H));
      for (int64_t u = 0; u < H; ++u) {
        double a = 0, b = 0;
        for (int64_t i = 0; i < C; ++i) {
          a += W1[size_t((e * H + u) * C + i)] * xn[i];
          if (c.swiglu) b += W3[size_t((e * H + u) * C + i)] * xn[i];
        }
        h[size_t(u)] =
            c.swiglu ? a / (1.0 + std::exp(-a)) * b
                     : 0.5 * a * (1.0 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
      }
      for (int64_t o = 0; o < C; ++o) {
        double y = 0;
        for (int64_t u = 0; u < H; ++u) y += W2[size_t((e * C + o) * H + u)] * h[size_t(u)];
        out[size_t(n * C + o)] += gate * y;
      }
    }
  }
  return out;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

TEST(MoE, ForwardMatchesFloat64Definition) {
  for (bool swiglu : {true, false})
    for (MoeGating gating : {MoeGating::Softmax, MoeGating::Sigmoid}) {
      auto m = make_moe(small_config(swiglu, gating));
      const Tensor x = random_input(1);
      std::vector<int64_t> load;
      const auto want = reference_output(*m, x, &load);
      Tensor y;
      {
        NoGradGuard no_grad;
        y = m->forward(x);
      }
      EXPECT_LT(max_rel_diff(as_double(y), want), 1e-5) << "swiglu " << swiglu;
      // The routes differ between tokens (the test would be weak otherwise).
      EXPECT_GT(std::count_if(load.begin(), load.end(), [](int64_t n) { return n > 0; }), 2);
    }
}

TEST(MoE, BiasChoosesButDoesNotWeigh) {
  auto m = make_moe(small_config(true));
  m->selection_bias = {0, 0, 100, 0};  // every token to expert 2, plus its best other one
  const Tensor x = random_input(2);
  std::vector<int64_t> load;
  const auto want = reference_output(*m, x, &load);
  EXPECT_EQ(load[2], kTokens);
  Tensor w = Tensor::empty({kTokens, kDim});
  fill_normal(w, RngKey{7, "moe_test", "w"}, 0, 0.0f, 1.0f);
  Tensor y = m->forward(x);  // recorded: the statistics count it
  EXPECT_LT(max_rel_diff(as_double(y), want), 1e-5);
  EXPECT_EQ(m->stats().load[2], kTokens);
  EXPECT_EQ(m->stats().tokens, kTokens);
  backward(sum(mul(y, w)));
  EXPECT_TRUE(m->w1.grad().defined());  // every expert has a gradient, empty ones zero
  const std::vector<float> g = to_vector(m->w1.grad());
  const int64_t per_expert = m->config.hidden * kDim;
  for (int64_t e = 0; e < 4; ++e) {
    const bool empty = m->stats().load[size_t(e)] == 0;
    const bool all_zero = std::all_of(g.begin() + e * per_expert, g.begin() + (e + 1) * per_expert,
                                      [](float v) { return v == 0.0f; });
    EXPECT_EQ(empty, all_zero) << "expert " << e;
  }
}

TEST(MoE, StatisticsCountEachTrainingForwardOnce) {
  auto m = make_moe(small_config(true));
  const Tensor x = random_input(3);
  {
    NoGradGuard no_grad;  // evaluation
    m->forward(x);
  }
  EXPECT_EQ(m->stats().forwards, 0);
  // Activation checkpointing: a forward without recording, then the recompute in backward.
  Tensor leaf = random_input(3);
  leaf.set_requires_grad(true);
  const auto out = checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m->forward(in[0])}; },
      {leaf});
  EXPECT_EQ(m->stats().forwards, 0);
  backward(sum(out[0]));
  EXPECT_EQ(m->stats().forwards, 1);
  EXPECT_EQ(std::accumulate(m->stats().load.begin(), m->stats().load.end(), int64_t(0)),
            kTokens * 2);
  // Softmax gating: the entropy of a distribution over 4 experts lies in (0, log 4].
  EXPECT_GT(m->stats().entropy, 0.0);
  EXPECT_LE(m->stats().entropy, std::log(4.0) + 1e-9);
  m->reset_stats();
  EXPECT_EQ(m->stats().forwards, 0);
}

TEST(MoE, SelectionBiasFollowsTheLoadSign) {
  MoeConfig c = small_config(true);
  c.bias_rate = 0.25;
  auto m = make_moe(c);
  m->update_selection_bias({10, 2, 6, 6});  // mean 6: over, under, even, even
  EXPECT_EQ(m->selection_bias, (std::vector<float>{-0.25f, 0.25f, 0.0f, 0.0f}));
  m->update_selection_bias({10, 2, 6, 6});
  EXPECT_EQ(m->selection_bias, (std::vector<float>{-0.5f, 0.5f, 0.0f, 0.0f}));
}

// d/dx and d/dw1 of sum(y * w) plus the balancing losses' gradient, against central
// differences of the same objective (the losses' values computed as nn::MoE defines them).
TEST(MoE, GradientsMatchFiniteDifferences) {
  MoeConfig c = small_config(false, MoeGating::Sigmoid);
  c.shared_experts = 1;
  c.aux_loss = 0.5;  // large, so that their gradients are seen
  c.z_loss = 0.1;
  auto m = make_moe(c);
  Tensor x = random_input(4);
  x.set_requires_grad(true);
  Tensor w = Tensor::empty({kTokens, kDim});
  fill_normal(w, RngKey{9, "moe_test", "w"}, 0, 0.0f, 1.0f);
  // The objective's value: the weighted sum, plus the losses from the layer's statistics.
  auto objective = [&]() {
    m->reset_stats();
    const Tensor y = m->forward(x);
    const MoeStats& s = m->stats();
    return double(item(sum(mul(y, w)))) + c.aux_loss * s.aux_loss + c.z_loss * s.z_loss;
  };
  m->reset_stats();
  backward(sum(mul(m->forward(x), w)));
  for (Tensor* p : {&x, &m->w1, &m->router->weight}) {
    const std::vector<float> analytic = to_vector(p->grad());
    std::vector<double> numeric(analytic.size());
    const float eps = 1e-2f;
    for (size_t i = 0; i < analytic.size(); ++i) {
      float* v = p->data<float>() + i;
      const float keep = *v;
      *v = keep + eps;
      const double up = objective();
      *v = keep - eps;
      const double down = objective();
      *v = keep;
      numeric[i] = (up - down) / (2 * double(eps));
    }
    EXPECT_LT(max_rel_diff(std::vector<double>(analytic.begin(), analytic.end()), numeric), 2e-2)
        << (p == &x       ? "x"
            : p == &m->w1 ? "w1"
                          : "router");
  }
}

TEST(MoE, BadConfigurationsSayWhat) {
  MoeConfig c = small_config(true);
  c.top_k = 5;
  expect_error([&] { c.validate(); }, {"moe.top_k 5", "moe.experts (4)"});
  c = small_config(true);
  c.every = 0;
  expect_error([&] { c.validate(); }, {"moe.every"});
  c = small_config(true);
  c.hidden = 0;
  expect_error([&] { c.validate(); }, {"moe.hidden"});
}

}  // namespace
}  // namespace loom::nn
