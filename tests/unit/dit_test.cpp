// The DiT model: shapes, adaLN-Zero identity at initialisation, layout-invariant init, and
// that flow-matching training on a small fixed batch reduces the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/diffusion/flow_matching.h"
#include "loom/models/dit/dit.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"

namespace {

using loom::Tensor;
using loom::models::Dit;
using loom::models::DitConfig;

DitConfig tiny() {
  DitConfig c;
  c.image_size = 8;
  c.channels = 1;
  c.patch = 2;
  c.width = 32;
  c.depth = 2;
  c.heads = 2;
  c.num_classes = 3;
  return c;
}

TEST(Dit, InitialVelocityIsZeroAndNamesAreQualified) {
  Dit model(tiny());
  model.init_parameters(0);
  Tensor x = loom::randn({4, 1, 8, 8}, loom::RngKey{1, "x", ""});
  Tensor t = loom::full({4}, 0.5);
  Tensor y = loom::from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4});
  Tensor v = model.forward(x, t, y);
  EXPECT_EQ(v.shape(), (loom::Shape{4, 1, 8, 8}));
  for (float e : loom::to_vector(v)) EXPECT_EQ(e, 0.0f);  // adaLN-Zero: final layer is zero
  bool found = false;
  for (auto& p : model.named_parameters()) found |= p.name == "blocks.1.attn.qkv.weight";
  EXPECT_TRUE(found);
  // Same seed, same weights; the RNG is keyed by name, not by creation order.
  Dit again(tiny());
  again.init_parameters(0);
  auto a = model.named_parameters(), b = again.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(loom::to_vector(a[i].tensor), loom::to_vector(b[i].tensor)) << a[i].name;
}

TEST(Dit, FlowMatchingTrainingReducesTheLoss) {
  Dit model(tiny());
  model.init_parameters(1);
  loom::optim::AdamW opt(model.named_parameters(), {.lr = 3e-3});
  // A dataset of one image: then the velocity is a function of (x_t, t) and the loss can go
  // to zero, unlike random data whose flow-matching loss has a large irreducible part.
  Tensor one = loom::tanh(loom::randn({1, 1, 8, 8}, loom::RngKey{2, "x", ""}));
  Tensor x0 = loom::contiguous(loom::expand(one, {16, 1, 8, 8}));
  Tensor y = loom::from_vector(std::vector<int64_t>(16, 1), {16});
  loom::diffusion::FlowMatchingConfig fm{.label_dropout = 0.1, .null_class = 3};
  auto velocity = [&](const Tensor& xt, const Tensor& t, const Tensor& labels) {
    return model.forward(xt, t, labels);
  };
  double first = 0, last = 0;
  const int steps = 150;
  for (int step = 0; step < steps; ++step) {
    Tensor loss = loom::diffusion::flow_matching_loss(velocity, x0, y, fm, 7, step);
    loom::backward(loss);
    opt.step(3e-3);
    opt.zero_grad();
    const double l = loom::item(loss);
    ASSERT_TRUE(std::isfinite(l));
    if (step < 10) first += l / 10;
    if (step >= steps - 10) last += l / 10;
  }
  EXPECT_LT(last, 0.5 * first) << "first 10 steps " << first << ", last 10 " << last;
}

}  // namespace
