// Gradient clipping folded into the AdamW update (the trainer's path: norm, then
// step(lr, clip_scale)) against clipping the gradients first and stepping on them (the path the
// PyTorch reference test checks: tests/reference/): the same bits, in weights and moments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"

namespace loom::optim {
namespace {

struct Trainee {
  Tensor w, b;
  std::unique_ptr<AdamW> opt;
  Trainee() {
    w = randn({7, 5}, RngKey{3, "clip_test", "w"});
    b = randn({5}, RngKey{3, "clip_test", "b"});
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    opt = std::make_unique<AdamW>(
        std::vector<nn::NamedParameter>{{"w", w, true}, {"b", b, false}},
        AdamWConfig{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  }
  void set_grads(int step, float size) {  // norm about size * sqrt(40)
    const std::string n = std::to_string(step);
    w.set_grad(mul_scalar(randn({7, 5}, RngKey{3, "clip_test", "gw" + n}), size));
    b.set_grad(mul_scalar(randn({5}, RngKey{3, "clip_test", "gb" + n}), size));
  }
  std::vector<float> state() const {
    std::vector<float> out = to_vector(w), more = to_vector(b);
    out.insert(out.end(), more.begin(), more.end());
    for (const auto& [name, t] : opt->named_state()) {
      more = to_vector(t);
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }
};

TEST(Clip, FoldedIntoTheUpdateEqualsClippingTheGradientsFirst) {
  Trainee first, folded;
  const double max_norm = 1.5;
  // Steps above the limit (clipped) and below it (scale 1).
  for (int step = 0; step < 4; ++step) {
    const float size = step % 2 == 0 ? 3.0f : 0.05f;
    first.set_grads(step, size);
    folded.set_grads(step, size);
    const double norm_first = clip_grad_norm({first.w, first.b}, max_norm);
    first.opt->step(1e-2);
    const double norm = grad_norm({folded.w, folded.b});
    EXPECT_EQ(norm, norm_first);
    EXPECT_EQ(clip_scale(norm, max_norm) < 1.0, step % 2 == 0) << "step " << step;
    folded.opt->step(1e-2, clip_scale(norm, max_norm));
    EXPECT_EQ(first.state(), folded.state()) << "step " << step;
  }
}

TEST(Clip, ScaleIsTheRatioAboveTheLimitAndOneOtherwise) {
  // torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6) when norm > max_norm.
  EXPECT_DOUBLE_EQ(clip_scale(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_scale(1.0, 1.0), 1.0);
  EXPECT_EQ(clip_scale(4.0, 0.0), 1.0);  // no clipping configured
  EXPECT_EQ(clip_scale(std::numeric_limits<double>::quiet_NaN(), 1.0), 1.0);  // the step guard's
  EXPECT_EQ(clip_scale(std::numeric_limits<double>::infinity(), 1.0), 1.0);   // business
}

}  // namespace
}  // namespace loom::optim
