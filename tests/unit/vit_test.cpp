// The ViT classifier: learns a separable toy task; accuracy and features helpers.
#include <gtest/gtest.h>

#include "loom/models/vit/vit.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"
#include "loom/train/recipes/vit_classifier.h"

namespace {

using loom::Tensor;

TEST(Vit, LearnsToTellBrightFromDarkImages) {
  loom::models::VitConfig c{.image_size = 8,
                            .channels = 1,
                            .patch = 4,
                            .width = 16,
                            .depth = 1,
                            .heads = 2,
                            .mlp_ratio = 2.0,
                            .num_classes = 2};
  loom::models::Vit model(c);
  model.init_parameters(0);
  // Class 1 images are brighter on average; noise makes single pixels ambiguous.
  const int64_t N = 64;
  Tensor noise = loom::randn({N, 1, 8, 8}, loom::RngKey{1, "x", ""});
  std::vector<float> px = loom::to_vector(noise);
  std::vector<int64_t> y(N);
  for (int64_t i = 0; i < N; ++i) {
    y[size_t(i)] = i % 2;
    for (int64_t j = 0; j < 64; ++j)
      px[size_t(i * 64 + j)] = 0.5f * px[size_t(i * 64 + j)] + (i % 2 ? 0.4f : -0.4f);
  }
  Tensor x = loom::from_vector(px, {N, 1, 8, 8}), labels = loom::from_vector(y, {N});
  loom::optim::AdamW opt(model.named_parameters(), {.lr = 1e-2});
  const double before = loom::train::classifier_accuracy(model, x, labels);
  for (int step = 0; step < 40; ++step) {
    loom::backward(loom::cross_entropy(model.forward(x), labels));
    opt.step(1e-2);
    opt.zero_grad();
  }
  const double after = loom::train::classifier_accuracy(model, x, labels);
  EXPECT_GE(after, 0.95) << "accuracy before training " << before;
  Tensor f = loom::train::classifier_features(model, x);
  EXPECT_EQ(f.shape(), (loom::Shape{N, 16}));
  EXPECT_FALSE(f.requires_grad());
}

}  // namespace
