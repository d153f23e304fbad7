#include "loom/data/clips.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom {

const char* const kClipDirectionNames[kClipDirections] = {
    "east", "north-east", "north", "north-west", "west", "south-west", "south", "south-east"};

namespace {
constexpr int64_t kItem = 28, kRoom = kClipSize - kItem;  // corners in [0, kRoom]
// Per direction: rows and columns moved a frame (rows grow downward: north is -1).
constexpr int64_t kStepY[kClipDirections] = {0, -1, -1, -1, 0, 1, 1, 1};
constexpr int64_t kStepX[kClipDirections] = {1, 1, 0, -1, -1, -1, 0, 1};

// p + d t reflected into [0, kRoom]: a triangle wave of period 2 kRoom.
int64_t bounce(int64_t p) {
  const int64_t period = 2 * kRoom;
  p = ((p % period) + period) % period;
  return p <= kRoom ? p : period - p;
}
}  // namespace

std::pair<int64_t, int64_t> clip_item_at(const ClipItem& it, int64_t frame) {
  return {bounce(it.y0 + kStepY[it.direction] * it.speed * frame),
          bounce(it.x0 + kStepX[it.direction] * it.speed * frame)};
}

Clip make_clip(const ImageDataset& source, uint64_t seed, bool test, int64_t index) {
  const Tensor& images = source.images;  // (N, 1, 28, 28)
  LOOM_CHECK(images.dim() == 4 && images.size(1) == 1 && images.size(2) == kItem &&
             images.size(3) == kItem && images.dtype() == DType::F32 && images.is_contiguous())
      << "clips: the items come from Fashion-MNIST (N, 1, 28, 28) images";
  LOOM_CHECK(index >= 0) << "clips: index " << index << " is negative";
  const uint64_t key = RngKey{seed, "clips", test ? "test" : "train"}.hash();
  uint64_t at = uint64_t(index) * 64;
  auto draw = [&](int64_t n) { return std::min(int64_t(uniform_at(key, at++) * float(n)), n - 1); };
  const int64_t N = images.size(0);
  const int64_t* labels = static_cast<const int64_t*>(source.labels.data_ptr());
  Clip c;
  const int64_t count = 1 + draw(kClipMaxItems);
  for (int64_t k = 0; k < count; ++k) {
    ClipItem it;
    it.source = draw(N);
    it.cls = labels[it.source];
    it.direction = draw(kClipDirections);
    it.speed = 1 + draw(3);
    it.y0 = draw(kRoom + 1);
    it.x0 = draw(kRoom + 1);
    c.items.push_back(it);
  }
  c.frames = Tensor::empty({kClipFrames, 1, kClipSize, kClipSize});
  float* out = static_cast<float*>(c.frames.data_ptr());
  std::fill(out, out + c.frames.numel(), -1.0f);
  const float* pixels = static_cast<const float*>(images.data_ptr());
  for (int64_t f = 0; f < kClipFrames; ++f)
    for (const ClipItem& it : c.items) {
      const auto [y0, x0] = clip_item_at(it, f);
      const float* item = pixels + it.source * kItem * kItem;
      float* frame = out + f * kClipSize * kClipSize;
      for (int64_t y = 0; y < kItem; ++y)
        for (int64_t x = 0; x < kItem; ++x) {
          float& p = frame[(y0 + y) * kClipSize + x0 + x];
          p = std::max(p, item[y * kItem + x]);
        }
    }
  return c;
}

}  // namespace loom
