// The text-to-image pieces around the MMDiT (its forward and gradients are checked against
// PyTorch in tests/reference/mmdit_reference.py):
//  - the caption vocabulary encodes every canvas caption word for word, and names an unknown
//    word or a caption longer than the context;
//  - caption dropout replaces a whole caption by null tokens, for the samples a class label
//    would be dropped for (one draw per sample);
//  - guidance with captions: a constant velocity per caption gives exactly v_u + s (v_c - v_u),
//    v_u the all-null caption's;
//  - the caption reaches the image: two captions give two different velocities.
// The references are written here (split at spaces and commas), not taken from the code.
#include <gtest/gtest.h>

#include <sstream>

#include "expect_error.h"
#include "loom/core/rng.h"
#include "loom/data/canvas.h"
#include "loom/data/captions.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/ops/ops.h"
#include "synthetic_items.h"

namespace loom {
namespace {

std::vector<std::string> words_of(const std::string& caption) {  // "x, y" -> x , y
  std::vector<std::string> out;
  std::istringstream in(caption);
  for (std::string w; in >> w;) {
    const bool comma = w.back() == ',';
    if (comma) w.pop_back();
    out.push_back(w);
    if (comma) out.push_back(",");
  }
  return out;
}

TEST(CaptionVocab, EncodesEveryCanvasCaptionWordForWord) {
  const CaptionVocab vocab;
  const ImageDataset items = testing_items::items();
  int64_t longest = 0;
  for (bool test : {false, true})
    for (int64_t i = 0; i < 300; ++i) {
      const Canvas c = make_canvas(items, 5, test, i);
      const std::vector<std::string> want = words_of(c.caption);
      const std::vector<int64_t> ids = vocab.encode(c.caption, 40);
      ASSERT_EQ(ids.size(), 40u);
      for (size_t k = 0; k < ids.size(); ++k)
        ASSERT_EQ(k < want.size() ? vocab.word(ids[k]) : "<pad>",
                  k < want.size() ? want[k] : "<pad>")
            << c.caption << ", token " << k;
      longest = std::max(longest, int64_t(want.size()));
    }
  EXPECT_LE(longest, CaptionVocab::longest_canvas_caption());
  // The longest caption there is: four large ankle boots.
  std::vector<CanvasItem> boots(4);
  for (int64_t q = 0; q < 4; ++q) boots[size_t(q)] = {9, q, true, 0, 0, 0};
  const std::string caption = canvas_caption(boots);
  EXPECT_EQ(int64_t(words_of(caption).size()), CaptionVocab::longest_canvas_caption()) << caption;
  EXPECT_NO_THROW(vocab.encode(caption, CaptionVocab::longest_canvas_caption()));
  expect_error([&] { vocab.encode(caption, CaptionVocab::longest_canvas_caption() - 1); },
               {"has 35 tokens, more than the text encoder's context of 34"});
}

TEST(CaptionVocab, NamesAnUnknownWord) {
  expect_error([] { CaptionVocab().encode("a large hat at the top left", 40); },
               {"the word \"hat\" is not in the caption vocabulary"});
  // The reserved tokens are not words a caption can use.
  expect_error([] { CaptionVocab().encode("a <null> bag", 40); }, {"\"<null>\""});
}

TEST(CaptionDropout, NullsWholeCaptionsOfTheSamplesALabelWouldLose) {
  const int64_t B = 64, L = 5, null = CaptionVocab::kNull;
  diffusion::FlowMatchingConfig flow;
  flow.label_dropout = 0.4;
  flow.null_class = null;
  const Tensor x0 = zeros({B, 1, 2, 2});
  std::vector<int64_t> ids, labels;
  for (int64_t i = 0; i < B * L; ++i) ids.push_back(2 + i % 7);
  for (int64_t i = 0; i < B; ++i) labels.push_back(3);
  const auto cap = diffusion::flow_matching_batch(x0, from_vector(ids, {B, L}), flow, 9, 4, 100);
  const auto lab = diffusion::flow_matching_batch(x0, from_vector(labels, {B}), flow, 9, 4, 100);
  ASSERT_EQ(cap.labels.shape(), (Shape{B, L}));
  const std::vector<int64_t> got = to_vector_i64(cap.labels), dropped = to_vector_i64(lab.labels);
  int64_t n_dropped = 0;
  for (int64_t b = 0; b < B; ++b) {
    const bool drop = dropped[size_t(b)] == null;
    n_dropped += drop;
    for (int64_t k = 0; k < L; ++k)
      ASSERT_EQ(got[size_t(b * L + k)], drop ? null : ids[size_t(b * L + k)])
          << "sample " << b << ", token " << k;
  }
  EXPECT_GT(n_dropped, 10);  // about 0.4 of 64
  EXPECT_LT(n_dropped, 40);
}

TEST(CaptionGuidance, IsTheNullCaptionsVelocityPlusScaleTimesTheDifference) {
  const Shape shape{3, 1, 2, 2};
  const int64_t L = 4, null = CaptionVocab::kNull;
  const std::vector<int64_t> ids = {2, 3, 0, 0, 5, 5, 5, 0, 9, 4, 2, 3};  // (3, 4)
  // A constant velocity per caption: 0.01 x (sum of its ids), -0.3 for the null caption.
  auto v_of = [&](const int64_t* caption) {
    double sum = 0;
    bool all_null = true;
    for (int64_t k = 0; k < L; ++k) sum += double(caption[k]), all_null &= caption[k] == null;
    return all_null ? -0.3 : 0.01 * sum;
  };
  const diffusion::VelocityFn per_caption = [&](const Tensor& xt, const Tensor&,
                                                const Tensor& captions) {
    EXPECT_EQ(captions.size(1), L);
    const std::vector<int64_t> c = to_vector_i64(captions);
    const int64_t per = xt.numel() / xt.size(0);
    std::vector<float> v;
    for (int64_t b = 0; b < captions.size(0); ++b)
      v.insert(v.end(), size_t(per), float(v_of(&c[size_t(b * L)])));
    return from_vector(v, xt.shape());
  };
  const std::vector<float> x1 = to_vector(randn(shape, RngKey{17, "sample.noise", ""}));
  const int64_t all_null[4] = {null, null, null, null};
  for (double scale : {3.0, 1.0, 0.0}) {
    const std::vector<float> x0 = to_vector(diffusion::sample(
        per_caption, shape, from_vector(ids, {3, L}), {6, false, scale, null, 1.0}, 17));
    for (size_t i = 0; i < x0.size(); ++i) {
      const double vc = v_of(&ids[(i / 4) * size_t(L)]), vu = v_of(all_null);
      ASSERT_NEAR(x0[i], x1[i] - (vu + scale * (vc - vu)), 2e-6) << "scale " << scale << ", " << i;
    }
  }
}

TEST(Mmdit, TheCaptionReachesTheImage) {
  models::MmditConfig c;
  c.image_size = 8, c.patch = 4, c.width = 16, c.depth = 2, c.heads = 2, c.vocab = 9;
  c.text_length = 3, c.text_depth = 1;
  models::Mmdit model(c);
  model.init_parameters(3);
  {  // adaLN-Zero starts as the zero function: give every zero parameter a value
    NoGradGuard no_grad;
    for (const auto& p : model.named_parameters()) fill_normal(p.tensor, RngKey{3, "t", p.name});
  }
  const Tensor x = randn({2, 1, 8, 8}, RngKey{3, "x", ""}), t = full({2}, 0.5);
  const std::vector<int64_t> a = {2, 3, 4, 2, 3, 4}, b = {2, 3, 4, 2, 3, 5};  // sample 1 differs
  const std::vector<float> va = to_vector(model.forward(x, t, from_vector(a, {2, 3})));
  const std::vector<float> vb = to_vector(model.forward(x, t, from_vector(b, {2, 3})));
  double same = 0, differ = 0;
  for (size_t i = 0; i < va.size(); ++i) (i < 64 ? same : differ) += std::abs(va[i] - vb[i]);
  EXPECT_EQ(same, 0.0);  // sample 0's caption is the same
  EXPECT_GT(differ / 64, 1e-3);
}

}  // namespace
}  // namespace loom
