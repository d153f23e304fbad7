// The MMDiT's caption encoders besides the closed word vocabulary (train/recipes/caption_text.h):
//  - a BPE's caption ids are its tokens + 2 after the two reserved ids, padded with 0; once told
//    the training captions, a caption holding a token none of them holds is refused naming its
//    word; a caption longer than the context is refused;
//  - a canvas's items without its image are the canvas's items;
//  - a frozen GPT's caption features are the GPT's features of the caption alone (its tokens,
//    ids - 2), zero at padding and for the null caption;
//  - an MMDiT reading features learns their projection, holds no parameter of the GPT and says
//    when none are attached.
// References: the BPE's own encode, the GPT run on the unpadded caption.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "loom/core/rng.h"
#include "loom/data/canvas.h"
#include "loom/data/captions.h"
#include "loom/models/gpt/gpt.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/caption_text.h"
#include "synthetic_items.h"

namespace loom {
namespace {

BpeTokenizer caption_bpe() {
  std::string text;
  const ImageDataset items = testing_items::items();
  for (int64_t i = 0; i < 400; ++i) text += make_canvas(items, 2, false, i).caption + "\n";
  return BpeTokenizer::train(text, 330);
}

TEST(CaptionTokenizer, BpeIdsAreTheTokensAfterTheTwoReservedIds) {
  const BpeTokenizer bpe = caption_bpe();
  const CaptionTokenizer tok(bpe);
  EXPECT_EQ(tok.size(), bpe.vocab_size() + 2);
  const std::string caption = "a small bag at the top right and a large sandal at the bottom left";
  const std::vector<int32_t> want = bpe.encode(caption);
  ASSERT_GT(want.size(), 4u);
  const std::vector<int64_t> ids = tok.encode(caption, 30);
  ASSERT_EQ(ids.size(), 30u);
  for (size_t k = 0; k < ids.size(); ++k)
    EXPECT_EQ(ids[k], k < want.size() ? int64_t(want[k]) + 2 : CaptionVocab::kPad) << k;
  expect_error([&] { tok.encode(caption, int64_t(want.size()) - 1); },
               {"has " + std::to_string(want.size()) +
                " tokens, more than the text encoder's "
                "context of " +
                std::to_string(want.size() - 1)});
}

TEST(CaptionTokenizer, RefusesATokenNoTrainingCaptionHoldsNamingItsWord) {
  CaptionTokenizer tok(caption_bpe());
  EXPECT_NO_THROW(tok.encode("a small zebra", 20));  // any text, until told the captions
  tok.learn_known({"a small bag at the top right", "a large sandal at the bottom left"});
  EXPECT_NO_THROW(tok.encode("a large bag at the top left", 20));
  expect_error([&] { tok.encode("a small zebra at the top left", 20); },
               {"the word \"zebra\" holds the token", "never occurs in the training captions"});
  expect_error([&] { tok.encode("a small coat", 20); }, {"the word \"coat\""});
}

TEST(Canvas, ItemsWithoutTheImageAreTheCanvasItems) {
  const ImageDataset items = testing_items::items();
  for (bool test : {false, true})
    for (int64_t i = 0; i < 50; ++i) {
      const Canvas c = make_canvas(items, 7, test, i);
      const std::vector<CanvasItem> got = canvas_items(items, 7, test, i);
      ASSERT_EQ(got.size(), c.items.size());
      EXPECT_EQ(canvas_caption(got), c.caption);
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_TRUE(got[k].source == c.items[k].source && got[k].dy == c.items[k].dy &&
                    got[k].dx == c.items[k].dx);
    }
}

models::GptConfig tiny_gpt() {
  models::GptConfig g;
  g.style = models::GptStyle::Llama;
  g.vocab_size = 16, g.context = 6, g.width = 16, g.depth = 2, g.heads = 2;
  return g;
}

TEST(GptCaptionFeatures, AreTheGptsFeaturesOfTheCaptionAloneAndZeroElsewhere) {
  models::Gpt gpt(tiny_gpt());
  gpt.init_parameters(4);
  // Row 0: tokens 5 7 9, then padding; row 1: the null caption.
  const Tensor ids = from_vector(std::vector<int64_t>{7, 9, 11, 0, 0, 1, 1, 1, 1, 1}, {2, 5});
  const std::vector<float> got = to_vector(train::gpt_caption_features(gpt, ids));  // (2, 5, 16)
  const std::vector<float> alone =
      to_vector(gpt.features(from_vector(std::vector<int64_t>{5, 7, 9}, {1, 3})));  // (1, 3, 16)
  ASSERT_EQ(got.size(), 2u * 5 * 16);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t row = i / 80, pos = (i / 16) % 5;
    if (row == 0 && pos < 3)
      EXPECT_NEAR(got[i], alone[pos * 16 + i % 16], 1e-5) << "position " << pos;
    else
      EXPECT_EQ(got[i], 0.0f) << "row " << row << ", position " << pos;
  }
}

TEST(Mmdit, ReadingFrozenFeaturesLearnsTheirProjectionAndHoldsNoneOfTheGpt) {
  auto gpt = std::make_shared<models::Gpt>(tiny_gpt());
  gpt->init_parameters(5);
  models::MmditConfig c;
  c.image_size = 8, c.patch = 4, c.width = 16, c.depth = 1, c.heads = 2, c.text_length = 4;
  c.text_depth = 1, c.vocab = 2 + 16, c.text_features = 16;
  models::Mmdit model(c);
  model.init_parameters(5);
  const Tensor x = randn({2, 1, 8, 8}, RngKey{5, "x", ""}), t = full({2}, 0.5);
  const Tensor ids = from_vector(std::vector<int64_t>{3, 4, 0, 0, 1, 1, 1, 1}, {2, 4});
  expect_error([&] { model.forward(x, t, ids); }, {"none are attached"});
  train::CaptionText text;
  text.gpt = gpt;
  text.attach(model);
  for (const auto& p : model.named_parameters())
    EXPECT_EQ(p.name.find("tok_embed"), std::string::npos);
  EXPECT_EQ(model.num_parameters(), models::Mmdit([&] {
                                      models::MmditConfig e = c;
                                      e.text_features = 0;
                                      return e;
                                    }())
                                            .num_parameters() -
                                        18 * 16 +
                                        (16 * 16 + 16));  // project replaces the embedding
  {  // adaLN-Zero starts as the zero function: give every zero parameter a value
    NoGradGuard no_grad;
    for (const auto& p : model.named_parameters()) fill_normal(p.tensor, RngKey{5, "t", p.name});
  }
  const Tensor v = model.forward(x, t, ids);
  backward(sum(mul(v, v)));
  bool found = false;
  for (const auto& p : model.named_parameters())
    if (p.name == "text.project.weight") {
      found = true;
      double g = 0;
      for (float e : to_vector(p.tensor.grad())) g += std::abs(e);
      EXPECT_GT(g, 0.0);
    }
  EXPECT_TRUE(found);
  for (const auto& p : gpt->named_parameters()) EXPECT_FALSE(p.tensor.grad().defined()) << p.name;
}

}  // namespace
}  // namespace loom
