// Captioned canvases made from Fashion-MNIST: the text-conditioning task of docs/text_to_image.md.
// A canvas is a 64x64 image holding 1 to 4 Fashion-MNIST items, each in its own quadrant (top
// left, top right, bottom left, bottom right), large (28x28, as stored) or small (14x14, 2x2
// means), jittered a few pixels, and a caption that names them in quadrant order:
//
//   "a small sandal at the top left and a large bag at the bottom right"
//
// A class label cannot describe a canvas: the caption carries the layout. Canvas i of a split
// is drawn from (seed, split, i) alone, its items from the Fashion-MNIST split of the same name.
// Held out by composition: class c at quadrant c mod 4 never appears in a training canvas, and
// every test canvas has at least one such item, so the test captions combine a class and a
// place never seen together in training.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/idx.h"

namespace loom {

constexpr int64_t kCanvasSize = 64, kCanvasQuadrants = 4;
extern const char* const kCanvasQuadrantNames[kCanvasQuadrants];  // "top left", ...
extern const char* const kFashionClassNames[10];                  // "t-shirt", ..., "ankle boot"

struct CanvasItem {
  int64_t cls = 0;         // Fashion-MNIST class
  int64_t quadrant = 0;    // 0 top left, 1 top right, 2 bottom left, 3 bottom right
  bool large = true;       // 28x28 (else 14x14)
  int64_t source = 0;      // the item's image: its index in the split
  int64_t dy = 0, dx = 0;  // the item's top-left corner on the canvas
};

struct Canvas {
  Tensor image;                   // (1, 64, 64) f32 in [-1, 1], background -1 (black)
  std::vector<CanvasItem> items;  // in quadrant order
  std::string caption;
};

// Whether class `cls` at `quadrant` is a held-out combination.
bool canvas_held_out(int64_t cls, int64_t quadrant);
// The caption of items in quadrant order.
std::string canvas_caption(const std::vector<CanvasItem>& items);
// The items' classes alone, in class order ("a sandal and a bag" for a bag and a sandal wherever
// they are): the class-label baseline's conditioning, which says nothing of the layout.
std::string canvas_class_caption(const std::vector<CanvasItem>& items);
// The items of canvas `index` of the training (test = false) or test split, without its image.
std::vector<CanvasItem> canvas_items(const ImageDataset& source, uint64_t seed, bool test,
                                     int64_t index);
// Canvas `index` of the training (test = false) or test split; source: the Fashion-MNIST split
// of the same name (28x28, one channel).
Canvas make_canvas(const ImageDataset& source, uint64_t seed, bool test, int64_t index);

}  // namespace loom
