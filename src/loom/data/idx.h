// Image datasets stored as IDX files (the MNIST / Fashion-MNIST format), read straight from
// the gzip-compressed files Debian ships (plain files work too).
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/tensor.h"

namespace loom {

struct ImageDataset {
  Tensor images;  // (N, C, H, W) f32, pixel p (0..255) stored as p / 127.5 - 1, in [-1, 1]
  Tensor labels;  // (N) i64, each in [0, num_classes)
  int64_t num_classes = 0;
};

// Reads an images file (magic 0x00000803, dims N, H, W; C = 1) and its labels file (magic
// 0x00000801, dim N). Throws loom::Error naming the file on a missing or unreadable file, a
// wrong magic, truncated data, a count mismatch or a label outside [0, num_classes).
ImageDataset load_idx(const std::string& images_path, const std::string& labels_path,
                      int64_t num_classes = 10);

// The Fashion-MNIST training (60000 images) or test (10000 images) split in `dir`, under the
// standard file names ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", ...); an
// unpacked file without ".gz" is used when only that one exists.
ImageDataset fashion_mnist(const std::string& dir = "/usr/share/datasets/fashion-mnist",
                           bool train = true);

}  // namespace loom
