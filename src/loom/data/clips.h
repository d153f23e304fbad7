// Clips of Fashion-MNIST items moving on a canvas: the video task of issue 54. A clip is 16
// frames of 64x64 holding 1 or 2 items (28x28, as stored), each with a class, one of 8
// directions (east, north-east, ..., south-east: the compass counterclockwise from east, on
// screen, where north is up) and a speed of 1 to 3 pixels a frame, bouncing off the canvas's
// edges; overlapping items show the brighter pixel. Clip i of a split is drawn from (seed,
// split, i) alone, its items from the Fashion-MNIST split of the same name (the test split is
// held out). `loom data clips` writes them as shards (clips-NNNNN.npy: (n, 16, 64, 64) u8
// frames, labels-NNNNN.npy: (n, 2, 3) i64 class, direction, speed per item, -1 where a clip
// has one item) and a filmstrip PNG.
#pragma once
#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/idx.h"

namespace loom {

constexpr int64_t kClipFrames = 16, kClipSize = 64, kClipDirections = 8, kClipMaxItems = 2;
extern const char* const kClipDirectionNames[kClipDirections];  // "east", "north-east", ...

struct ClipItem {
  int64_t cls = 0, source = 0;  // class, and the item's image: its index in the split
  int64_t direction = 0;        // 0 east, 1 north-east, ..., 7 south-east
  int64_t speed = 1;            // pixels a frame, along each axis it moves on
  int64_t y0 = 0, x0 = 0;       // top-left corner in frame 0, in [0, 64 - 28]
};

struct Clip {
  Tensor frames;  // (16, 1, 64, 64) f32 in [-1, 1], background -1
  std::vector<ClipItem> items;
};

// The item's top-left corner in `frame`: moving `speed` pixels a frame along its direction,
// reflected at 0 and 64 - 28 (a bounce).
std::pair<int64_t, int64_t> clip_item_at(const ClipItem& item, int64_t frame);
Clip make_clip(const ImageDataset& source, uint64_t seed, bool test, int64_t index);

}  // namespace loom
