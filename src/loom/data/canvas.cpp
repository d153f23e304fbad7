#include "loom/data/canvas.h"

#include <algorithm>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom {

const char* const kCanvasQuadrantNames[kCanvasQuadrants] = {"top left", "top right", "bottom left",
                                                            "bottom right"};
const char* const kFashionClassNames[10] = {"t-shirt", "trouser",   "pullover", "dress",
                                            "coat",    "sandal",    "shirt",    "sneaker",
                                            "bag",     "ankle boot"};

namespace {
constexpr int64_t kItem = 28, kQuadrant = kCanvasSize / 2;
constexpr int64_t kDrawsPerTry = 32, kTries = 256;  // a canvas's draws: (index, try, draw)
}  // namespace

bool canvas_held_out(int64_t cls, int64_t quadrant) {
  return cls % kCanvasQuadrants == quadrant;
}

std::string canvas_caption(const std::vector<CanvasItem>& items) {
  std::string caption;
  for (size_t k = 0; k < items.size(); ++k) {
    const CanvasItem& it = items[k];
    if (k > 0) caption += k + 1 == items.size() ? " and " : ", ";
    caption += std::string("a ") + (it.large ? "large " : "small ") + kFashionClassNames[it.cls] +
               " at the " + kCanvasQuadrantNames[it.quadrant];
  }
  return caption;
}

std::string canvas_class_caption(const std::vector<CanvasItem>& items) {
  std::vector<int64_t> classes;
  for (const CanvasItem& it : items) classes.push_back(it.cls);
  std::sort(classes.begin(), classes.end());
  std::string caption;
  for (size_t k = 0; k < classes.size(); ++k) {
    if (k > 0) caption += k + 1 == classes.size() ? " and " : ", ";
    caption += std::string("a ") + kFashionClassNames[classes[k]];
  }
  return caption;
}

std::vector<CanvasItem> canvas_items(const ImageDataset& source, uint64_t seed, bool test,
                                     int64_t index) {
  const Tensor& images = source.images;  // (N, 1, 28, 28)
  LOOM_CHECK(images.dim() == 4 && images.size(1) == 1 && images.size(2) == kItem &&
             images.size(3) == kItem && images.dtype() == DType::F32 && source.num_classes == 10)
      << "canvas: the items come from Fashion-MNIST (N, 1, 28, 28) images of 10 classes";
  LOOM_CHECK(index >= 0) << "canvas: index " << index << " is negative";
  const int64_t N = images.size(0);
  const uint64_t key = RngKey{seed, "canvas", test ? "test" : "train"}.hash();
  const int64_t* labels = static_cast<const int64_t*>(source.labels.data_ptr());
  // Drawn again until the split's rule holds: no held-out item in training, one at least in
  // test (about 1 try in 4 is redrawn).
  for (int64_t t = 0; t < kTries; ++t) {
    uint64_t at = uint64_t((index * kTries + t) * kDrawsPerTry);
    auto draw = [&](int64_t n) {
      return std::min(int64_t(uniform_at(key, at++) * float(n)), n - 1);
    };
    int64_t order[kCanvasQuadrants] = {0, 1, 2, 3};
    for (int64_t k = kCanvasQuadrants - 1; k > 0; --k) std::swap(order[k], order[draw(k + 1)]);
    const int64_t n = 1 + draw(kCanvasQuadrants);
    bool quadrant_used[kCanvasQuadrants] = {};
    for (int64_t k = 0; k < n; ++k) quadrant_used[order[k]] = true;
    std::vector<CanvasItem> items;
    int64_t held_out = 0;
    for (int64_t q = 0; q < kCanvasQuadrants; ++q) {
      if (!quadrant_used[q]) continue;
      CanvasItem it;
      it.quadrant = q;
      it.source = draw(N);
      it.cls = labels[it.source];
      it.large = draw(2) == 1;
      const int64_t size = it.large ? kItem : kItem / 2, room = kQuadrant - size;
      it.dy = (q / 2) * kQuadrant + draw(room + 1);
      it.dx = (q % 2) * kQuadrant + draw(room + 1);
      held_out += canvas_held_out(it.cls, q);
      items.push_back(it);
    }
    if (test ? held_out == 0 : held_out > 0) continue;
    return items;
  }
  LOOM_FAIL() << "canvas: no canvas of its split's rule in " << kTries << " tries";
  return {};
}

Canvas make_canvas(const ImageDataset& source, uint64_t seed, bool test, int64_t index) {
  Canvas c;
  c.items = canvas_items(source, seed, test, index);
  const Tensor& images = source.images;  // (N, 1, 28, 28)
  c.image = Tensor::empty({1, kCanvasSize, kCanvasSize});
  float* out = static_cast<float*>(c.image.data_ptr());
  std::fill(out, out + kCanvasSize * kCanvasSize, -1.0f);
  const float* pixels = static_cast<const float*>(images.data_ptr());
  for (const CanvasItem& it : c.items) {
    const float* item = pixels + it.source * kItem * kItem;  // (28, 28)
    const int64_t size = it.large ? kItem : kItem / 2, f = kItem / size;
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        float sum = 0;  // the f x f block's mean (f = 1: the pixel)
        for (int64_t i = 0; i < f; ++i)
          for (int64_t j = 0; j < f; ++j) sum += item[(y * f + i) * kItem + x * f + j];
        out[(it.dy + y) * kCanvasSize + it.dx + x] = sum / float(f * f);
      }
  }
  c.caption = canvas_caption(c.items);
  return c;
}

}  // namespace loom
