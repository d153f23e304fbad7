// The canvas judge (train/recipes/canvas_judge.h) with the shipped classifier on real canvases
// (Fashion-MNIST's test split): it finds every item where the caption put it, in its size, and
// names the class about as often as the classifier names test images; against other canvases'
// captions, or on blank canvases, it scores what chance allows. Thresholds below the measured
// values (in the comments), from 400 canvases.
#include "loom/train/recipes/canvas_judge.h"

#include <gtest/gtest.h>

#include "loom/diffusion/fid.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {
namespace {

TEST(CanvasJudge, RealCanvasesPassAndOthersCaptionsFail) {
  const ImageDataset test = fashion_mnist("/usr/share/datasets/fashion-mnist", /*train=*/false);
  const auto classifier =
      load_classifier(std::string(LOOM_SOURCE_DIR) + "/assets/fmnist_classifier");
  const int64_t N = 1000;
  std::vector<Tensor> images;
  std::vector<std::vector<CanvasItem>> asked, shifted;
  for (int64_t i = 0; i < N; ++i) {
    Canvas c = make_canvas(test, 1, /*test=*/true, i);
    images.push_back(c.image);
    asked.push_back(c.items);
  }
  for (int64_t i = 0; i < N; ++i) shifted.push_back(asked[size_t((i + 1) % N)]);
  const std::vector<CanvasReading> readings = read_canvases(*classifier, stack(images, 0));
  const CanvasScores real = score_canvases(readings, asked);
  std::printf("real canvases: caption %.3f, place %.3f, size %.3f, class %.3f (%lld items)\n",
              real.caption, real.place, real.size, real.cls, (long long)real.items);
  EXPECT_GT(real.place, 0.99);    // measured 0.999
  EXPECT_GT(real.size, 0.97);     // measured 0.999
  EXPECT_GT(real.cls, 0.80);      // measured 0.880 (the classifier: 0.916 on test images)
  EXPECT_GT(real.caption, 0.55);  // measured 0.675
  const CanvasScores other = score_canvases(readings, shifted);
  std::printf("others' captions: caption %.3f, place %.3f, size %.3f, class %.3f\n", other.caption,
              other.place, other.size, other.cls);
  EXPECT_LT(other.caption, 0.05);
  EXPECT_LT(other.cls, 0.2);
  const std::vector<CanvasReading> blank =
      read_canvases(*classifier, full({N, 1, kCanvasSize, kCanvasSize}, -1.0));
  const CanvasScores none = score_canvases(blank, asked);
  EXPECT_EQ(none.caption, 0.0);
  EXPECT_EQ(none.cls, 0.0);
  EXPECT_EQ(none.size, 0.0);
}

// The Fréchet distance on canvas features: two halves of the real test canvases are close;
// training canvases (other compositions: no held-out pair, fewer items) are far (measured with
// 1,000 canvases each: 5.2 against 35.1; blank canvases 349). About 15 s, most of it the
// distances' eigen-decompositions at 4 x 96 features.
TEST(CanvasJudge, FrechetDistanceSeesCompositions) {
  const ImageDataset test = fashion_mnist("/usr/share/datasets/fashion-mnist", /*train=*/false);
  const auto classifier =
      load_classifier(std::string(LOOM_SOURCE_DIR) + "/assets/fmnist_classifier");
  auto stats = [&](bool test_split, int64_t first, int64_t n) {
    std::vector<Tensor> images;
    for (int64_t i = 0; i < n; ++i)
      images.push_back(make_canvas(test, 2, test_split, first + i).image);
    return diffusion::feature_stats(canvas_features(*classifier, stack(images, 0)));
  };
  const int64_t N = 1000;
  const diffusion::FeatureStats a = stats(true, 0, N);
  const double same = diffusion::frechet_distance(a, stats(true, N, N));
  const double other = diffusion::frechet_distance(a, stats(false, 0, N));
  std::printf("Frechet distance: test halves %.2f, test vs train %.2f\n", same, other);
  EXPECT_LT(3 * same, other);
}

}  // namespace
}  // namespace loom::train
