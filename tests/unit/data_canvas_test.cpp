// Captioned canvases (data/canvas.h) on synthetic 28x28 items whose every pixel says which item
// it is (so a pasted item is recognised on the canvas): canvases are determined by (seed,
// split, index); a training canvas never holds a held-out (class, quadrant) pair and a test
// canvas always holds one; each item sits inside its quadrant, pasted exactly (large) or as
// 2x2 means (small), the rest of the canvas black; the caption names the items in order.
#include "loom/data/canvas.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loom/ops/ops.h"
#include "synthetic_items.h"

namespace loom {
namespace {

using testing_items::items;
using testing_items::pixel;

TEST(Canvas, ItemsCaptionsAndTheHeldOutSplit) {
  const ImageDataset source = items();
  int64_t held_out_items = 0, counts[5] = {};
  for (bool test : {false, true})
    for (int64_t i = 0; i < 300; ++i) {
      const Canvas c = make_canvas(source, 3, test, i);
      const Canvas again = make_canvas(source, 3, test, i);
      ASSERT_EQ(to_vector(c.image), to_vector(again.image)) << "canvas " << i << " not repeatable";
      ASSERT_EQ(c.caption, again.caption);
      ASSERT_GE(c.items.size(), 1u);
      ASSERT_LE(c.items.size(), 4u);
      ++counts[c.items.size()];
      int64_t held = 0;
      std::vector<bool> covered(64 * 64, false);
      const std::vector<float> img = to_vector(c.image);
      std::string caption;
      for (size_t k = 0; k < c.items.size(); ++k) {
        const CanvasItem& it = c.items[k];
        if (k > 0) {
          ASSERT_GT(it.quadrant, c.items[k - 1].quadrant) << "items not in quadrant order";
        }
        ASSERT_EQ(it.cls, it.source % 10) << "an item's class is its image's label";
        held += it.cls % 4 == it.quadrant;
        const int64_t size = it.large ? 28 : 14, f = 28 / size;
        // Inside its quadrant.
        const int64_t qy = it.quadrant / 2 * 32, qx = it.quadrant % 2 * 32;
        ASSERT_TRUE(it.dy >= qy && it.dy + size <= qy + 32 && it.dx >= qx &&
                    it.dx + size <= qx + 32);
        for (int64_t y = 0; y < size; ++y)
          for (int64_t x = 0; x < size; ++x) {
            double want = 0;
            for (int64_t a = 0; a < f; ++a)
              for (int64_t b = 0; b < f; ++b) want += pixel(it.source, y * f + a, x * f + b);
            want /= double(f * f);
            const size_t at = size_t((it.dy + y) * 64 + it.dx + x);
            ASSERT_NEAR(img[at], want, 1e-6) << "item " << k << " of canvas " << i;
            covered[at] = true;
          }
        const char* names[] = {"t-shirt", "trouser", "pullover", "dress", "coat",
                               "sandal",  "shirt",   "sneaker",  "bag",   "ankle boot"};
        const char* places[] = {"top left", "top right", "bottom left", "bottom right"};
        if (k > 0) caption += k + 1 == c.items.size() ? " and " : ", ";
        caption += std::string("a ") + (it.large ? "large " : "small ") + names[it.cls] +
                   " at the " + places[it.quadrant];
      }
      for (size_t p = 0; p < covered.size(); ++p)
        if (!covered[p]) {
          ASSERT_EQ(img[p], -1.0f) << "canvas " << i << " pixel " << p;
        }
      EXPECT_EQ(c.caption, caption);
      if (test)
        EXPECT_GE(held, 1) << "test canvas " << i << ": no held-out pair: " << c.caption;
      else
        EXPECT_EQ(held, 0) << "training canvas " << i << " holds a held-out pair: " << c.caption;
      held_out_items += held;
    }
  // Every count of items occurs; the splits differ.
  for (int n = 1; n <= 4; ++n) EXPECT_GT(counts[n], 30) << n << " items";
  EXPECT_NE(make_canvas(source, 3, false, 0).caption + make_canvas(source, 3, false, 1).caption,
            make_canvas(source, 4, false, 0).caption + make_canvas(source, 4, false, 1).caption)
      << "the seed changes nothing";
  EXPECT_GT(held_out_items, 300);
}

// The class-label baseline's conditioning: the classes in class order, nothing of size or place
// (always "a", as the canvas grammar says it).
TEST(Canvas, ClassCaptionsNameTheClassesAloneInClassOrder) {
  const auto item = [](int64_t cls, int64_t quadrant, bool large) {
    CanvasItem it;
    it.cls = cls;
    it.quadrant = quadrant;
    it.large = large;
    return it;
  };
  EXPECT_EQ(canvas_class_caption({item(8, 0, true)}), "a bag");
  EXPECT_EQ(canvas_class_caption({item(8, 0, true), item(5, 3, false)}), "a sandal and a bag");
  EXPECT_EQ(canvas_class_caption({item(5, 3, false), item(8, 0, true)}), "a sandal and a bag");
  EXPECT_EQ(canvas_class_caption({item(9, 1, true), item(0, 0, true), item(0, 2, false)}),
            "a t-shirt, a t-shirt and a ankle boot");
}

}  // namespace
}  // namespace loom
