// The judge of captioned canvases (data/canvas.h; docs/text_to_image.md): what a canvas shows in
// each quadrant -- an item or nothing, its size, its class by the shipped Fashion-MNIST
// classifier -- scored against what its caption asked for.
#pragma once
#include <array>
#include <vector>

#include "loom/data/canvas.h"
#include "loom/models/vit/vit.h"

namespace loom::train {

// One canvas as the judge reads it, per quadrant.
struct CanvasReading {
  std::array<bool, kCanvasQuadrants> present{}, large{};
  std::array<int64_t, kCanvasQuadrants> cls{};  // -1 where nothing is
};

struct CanvasScores {
  int64_t canvases = 0, items = 0;
  double caption = 0;  // canvases with every quadrant as asked (item or nothing, size, class)
  double place = 0;    // quadrants holding an item exactly where one was asked
  double size = 0;     // asked items found at their quadrant in their size
  double cls = 0;      // asked items found at their quadrant as their class
};

// Reads canvases (N, 1, 64, 64) in [-1, 1] (black background): a quadrant holds an item when
// 20 of its pixels or more are lit (above -0.8); the lit pixels' extent says large (over 19
// pixels) or small; the classifier sees the 28x28 window centred on them (a small item's 14x14
// window, each pixel doubled).
std::vector<CanvasReading> read_canvases(const models::Vit& classifier, const Tensor& canvases);
// The readings against the items each caption asked for.
CanvasScores score_canvases(const std::vector<CanvasReading>& readings,
                            const std::vector<std::vector<CanvasItem>>& asked);

// A canvas's features for a Fréchet distance: the classifier's penultimate features of each
// quadrant's centre 28x28 window, concatenated in quadrant order (N, 4 x width). Fixed
// windows, not the judge's reading: the distance sees what is drawn, found or not.
Tensor canvas_features(const models::Vit& classifier, const Tensor& canvases);

}  // namespace loom::train
