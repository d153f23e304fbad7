// Writing sample images: a minimal PNG encoder (8-bit grayscale or RGB, no interlace) and a
// helper that tiles a batch of generated images into one grid picture.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

// pixels: height rows of width * channels bytes, channels interleaved (RGBRGB...). channels is
// 1 (grayscale) or 3 (RGB). The file is written atomically (see core/atomic_file.h).
void write_png(const std::string& path, const std::vector<uint8_t>& pixels, int width, int height,
               int channels);
// The same PNG file's bytes, in memory (a TensorBoard image).
std::string encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels);

struct ImageGrid {
  std::vector<uint8_t> pixels;  // (height, width, channels), ready for write_png
  int width = 0;
  int height = 0;
  int channels = 0;
};

// images: (N, C, H, W), any floating dtype and device, values in [-1, 1] (clamped; NaN is
// black), C = 1 or 3. Image i goes to row i / cols, column i % cols; N may be less than
// rows * cols (empty cells stay black). `padding` black pixels separate the cells and frame
// the grid: width = cols * (W + padding) + padding, likewise for height.
ImageGrid image_grid(const Tensor& images, int rows, int cols, int padding = 2);

// `grid` (of image_grid, cells `cell_height` high, `padding` apart) with a margin on its left
// where each row's label is written (white digits, 3x5 pixels scaled 2x): which class a row
// of samples is. labels: one per row, non-negative.
ImageGrid label_rows(const ImageGrid& grid, const std::vector<int64_t>& labels, int cell_height,
                     int padding = 2);

}  // namespace loom
