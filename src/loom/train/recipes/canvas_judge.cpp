#include "loom/train/recipes/canvas_judge.h"

#include <algorithm>

#include "loom/autograd/node.h"
#include "loom/core/error.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

namespace {
constexpr int64_t kQuadrant = kCanvasSize / 2, kItem = 28;
constexpr float kLit = -0.8f;
constexpr int64_t kMinLit = 20, kLargeExtent = 19;
}  // namespace

std::vector<CanvasReading> read_canvases(const models::Vit& classifier, const Tensor& canvases) {
  LOOM_CHECK(canvases.dim() == 4 && canvases.size(1) == 1 && canvases.size(2) == kCanvasSize &&
             canvases.size(3) == kCanvasSize)
      << "canvas judge: canvases are (N, 1, 64, 64), got " << canvases.shape();
  const int64_t N = canvases.size(0);
  const std::vector<float> px = to_vector(canvases);
  std::vector<CanvasReading> readings(static_cast<size_t>(N));
  std::vector<float> windows;  // (M, 1, 28, 28): the items the classifier is asked about
  std::vector<std::pair<int64_t, int64_t>> where;  // (canvas, quadrant) of each window
  for (int64_t n = 0; n < N; ++n) {
    const float* canvas = px.data() + n * kCanvasSize * kCanvasSize;
    CanvasReading& r = readings[size_t(n)];
    for (int64_t q = 0; q < kCanvasQuadrants; ++q) {
      const int64_t qy = q / 2 * kQuadrant, qx = q % 2 * kQuadrant;
      int64_t lit = 0, y0 = kQuadrant, y1 = -1, x0 = kQuadrant, x1 = -1;
      for (int64_t y = 0; y < kQuadrant; ++y)
        for (int64_t x = 0; x < kQuadrant; ++x)
          if (canvas[(qy + y) * kCanvasSize + qx + x] > kLit) {
            ++lit;
            y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, x), x1 = std::max(x1, x);
          }
      r.cls[size_t(q)] = -1;
      r.present[size_t(q)] = lit >= kMinLit;
      if (!r.present[size_t(q)]) continue;
      r.large[size_t(q)] = std::max(y1 - y0, x1 - x0) + 1 > kLargeExtent;
      // The window the item was drawn in, centred on its lit pixels, inside the quadrant.
      const int64_t size = r.large[size_t(q)] ? kItem : kItem / 2, f = kItem / size;
      const int64_t wy = std::clamp((y0 + y1 + 1) / 2 - size / 2, int64_t(0), kQuadrant - size);
      const int64_t wx = std::clamp((x0 + x1 + 1) / 2 - size / 2, int64_t(0), kQuadrant - size);
      for (int64_t y = 0; y < kItem; ++y)
        for (int64_t x = 0; x < kItem; ++x)
          windows.push_back(canvas[(qy + wy + y / f) * kCanvasSize + qx + wx + x / f]);
      where.emplace_back(n, q);
    }
  }
  if (where.empty()) return readings;
  NoGradGuard no_grad;
  const int64_t M = int64_t(where.size()), K = classifier.config.num_classes, chunk = 500;
  const Tensor all = from_vector(windows, {M, 1, kItem, kItem});
  for (int64_t at = 0; at < M; at += chunk) {
    const int64_t m = std::min(chunk, M - at);
    const std::vector<float> logits = to_vector(classifier.forward(narrow(all, 0, at, m)));
    for (int64_t i = 0; i < m; ++i) {
      const float* row = logits.data() + i * K;
      const auto [n, q] = where[size_t(at + i)];
      readings[size_t(n)].cls[size_t(q)] = int64_t(std::max_element(row, row + K) - row);
    }
  }
  return readings;
}

CanvasScores score_canvases(const std::vector<CanvasReading>& readings,
                            const std::vector<std::vector<CanvasItem>>& asked) {
  LOOM_CHECK(readings.size() == asked.size())
      << "canvas judge: " << readings.size() << " canvases, " << asked.size() << " captions";
  CanvasScores s;
  s.canvases = int64_t(readings.size());
  int64_t captions = 0, places = 0, sizes = 0, classes = 0;
  for (size_t n = 0; n < readings.size(); ++n) {
    const CanvasReading& r = readings[n];
    std::array<const CanvasItem*, kCanvasQuadrants> want{};
    for (const CanvasItem& it : asked[n]) want[size_t(it.quadrant)] = &it;
    bool all = true;
    for (size_t q = 0; q < kCanvasQuadrants; ++q) {
      const bool place = r.present[q] == (want[q] != nullptr);
      places += place;
      all &= place;
      if (!want[q]) continue;
      ++s.items;
      const bool size = r.present[q] && r.large[q] == want[q]->large;
      const bool cls = r.present[q] && r.cls[q] == want[q]->cls;
      sizes += size;
      classes += cls;
      all &= size && cls;
    }
    captions += all;
  }
  const double canvases = double(std::max<int64_t>(s.canvases, 1));
  const double items = double(std::max<int64_t>(s.items, 1));
  s.caption = double(captions) / canvases;
  s.place = double(places) / (canvases * kCanvasQuadrants);
  s.size = double(sizes) / items;
  s.cls = double(classes) / items;
  return s;
}

Tensor canvas_features(const models::Vit& classifier, const Tensor& canvases) {
  const int64_t N = canvases.size(0), margin = (kQuadrant - kItem) / 2;
  std::vector<Tensor> quadrants;
  for (int64_t q = 0; q < kCanvasQuadrants; ++q) {
    const Tensor window = narrow(narrow(canvases, 2, q / 2 * kQuadrant + margin, kItem), 3,
                                 q % 2 * kQuadrant + margin, kItem);  // (N, 1, 28, 28)
    quadrants.push_back(classifier_features(classifier, contiguous(window)));
  }
  LOOM_CHECK(N > 0) << "canvas judge: no canvases";
  return cat(quadrants, 1);
}

}  // namespace loom::train
