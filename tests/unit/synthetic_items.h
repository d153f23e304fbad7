// Fashion-MNIST-shaped items for the canvas and clip tests: 40 images of 28x28, item k of class
// k % 10, whose every pixel says which item and which pixel it is, so a pasted item is
// recognised wherever it lands.
#pragma once
#include <vector>

#include "loom/data/idx.h"
#include "loom/ops/creation.h"

namespace loom::testing_items {

// Pixel (y, x) of item k.
inline double pixel(int64_t k, int64_t y, int64_t x) {
  return double(k + 1) / 100.0 + double(y * 28 + x) * 1e-4 - 0.9;
}

inline ImageDataset items() {
  ImageDataset d;
  d.num_classes = 10;
  std::vector<float> px;
  std::vector<int64_t> labels;
  for (int64_t k = 0; k < 40; ++k) {
    labels.push_back(k % 10);
    for (int64_t p = 0; p < 28 * 28; ++p) px.push_back(float(pixel(k, p / 28, p % 28)));
  }
  d.images = from_vector(px, {40, 1, 28, 28});
  d.labels = from_vector(labels, {40});
  return d;
}

}  // namespace loom::testing_items
