// Moving-item clips (data/clips.h) on synthetic 28x28 items whose every pixel says which item it
// is: each item's path against a frame-by-frame simulation written here (move, and at an edge
// reflect the position and reverse the velocity), every frame against the items drawn at those
// positions (the brighter pixel where two overlap, black elsewhere), clips repeatable from
// (seed, split, index), every direction, speed and item count drawn.
#include "loom/data/clips.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "loom/ops/ops.h"
#include "synthetic_items.h"

namespace loom {
namespace {

using testing_items::items;
using testing_items::pixel;

// Frame by frame: each axis moves by its velocity; past an edge the position is reflected and
// the velocity reversed.
std::vector<std::pair<int64_t, int64_t>> simulate(const ClipItem& it) {
  const int64_t dy[8] = {0, -1, -1, -1, 0, 1, 1, 1}, dx[8] = {1, 1, 0, -1, -1, -1, 0, 1};
  const int64_t room = 64 - 28;
  int64_t y = it.y0, x = it.x0, vy = dy[it.direction] * it.speed, vx = dx[it.direction] * it.speed;
  std::vector<std::pair<int64_t, int64_t>> path;
  for (int64_t f = 0; f < 16; ++f) {
    path.emplace_back(y, x);
    for (auto [p, v] : {std::pair<int64_t*, int64_t*>{&y, &vy}, {&x, &vx}}) {
      *p += *v;
      if (*p < 0) *p = -*p, *v = -*v;
      if (*p > room) *p = 2 * room - *p, *v = -*v;
    }
  }
  return path;
}

TEST(Clips, PathsBounceAndFramesDrawTheItems) {
  // Every direction and speed from corners, edges and the middle.
  for (int64_t d = 0; d < 8; ++d)
    for (int64_t s = 1; s <= 3; ++s)
      for (int64_t y0 : {0, 1, 17, 35, 36})
        for (int64_t x0 : {0, 2, 18, 36}) {
          ClipItem it;
          it.direction = d, it.speed = s, it.y0 = y0, it.x0 = x0;
          const auto path = simulate(it);
          for (int64_t f = 0; f < 16; ++f)
            ASSERT_EQ(clip_item_at(it, f), path[size_t(f)])
                << "direction " << d << ", speed " << s << ", from (" << y0 << ", " << x0
                << "), frame " << f;
        }
  const ImageDataset source = items();
  int64_t directions[8] = {}, speeds[4] = {}, counts[3] = {};
  for (bool test : {false, true})
    for (int64_t i = 0; i < 200; ++i) {
      const Clip c = make_clip(source, 9, test, i);
      ASSERT_EQ(to_vector(c.frames), to_vector(make_clip(source, 9, test, i).frames));
      ++counts[c.items.size()];
      std::vector<float> want(16 * 64 * 64, -1.0f);
      for (const ClipItem& it : c.items) {
        ASSERT_EQ(it.cls, it.source % 10);
        ++directions[it.direction], ++speeds[it.speed];
        const auto path = simulate(it);
        for (int64_t f = 0; f < 16; ++f)
          for (int64_t y = 0; y < 28; ++y)
            for (int64_t x = 0; x < 28; ++x) {
              float& p = want[size_t(f * 4096 + (path[size_t(f)].first + y) * 64 +
                                     path[size_t(f)].second + x)];
              p = std::max(p, float(pixel(it.source, y, x)));
            }
      }
      const std::vector<float> got = to_vector(c.frames);
      for (size_t p = 0; p < got.size(); ++p)
        ASSERT_NEAR(got[p], want[p], 1e-6) << "clip " << i << ", element " << p;
    }
  for (int64_t d = 0; d < 8; ++d) EXPECT_GT(directions[d], 20) << kClipDirectionNames[d];
  for (int64_t s = 1; s <= 3; ++s) EXPECT_GT(speeds[s], 60) << "speed " << s;
  EXPECT_GT(counts[1], 100);
  EXPECT_GT(counts[2], 100);
}

}  // namespace
}  // namespace loom
