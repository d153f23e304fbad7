// A folder of synthetic labelled images for the device trainer tests (data.dataset "images"):
// made by the test, so it needs no dataset on the machine (the device machine has none).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "loom/diffusion/png.h"

namespace loom::test {

// n 28 x 28 grayscale PNGs with labels.txt: each class a bright square at its own place on a
// noisy background.
inline std::string png_folder(const std::string& dir, int n, uint64_t seed) {
  std::filesystem::create_directories(dir);
  std::ofstream labels(dir + "/labels.txt");
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    const int label = i % 10;
    std::vector<uint8_t> pixels(28 * 28);
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        const bool square = y / 7 == label / 4 && x / 7 == label % 4;
        pixels[size_t(y * 28 + x)] = uint8_t(square ? 200 + rng() % 56 : rng() % 40);
      }
    const std::string name = "img" + std::to_string(i) + ".png";
    write_png(dir + "/" + name, pixels, 28, 28, 1);
    labels << name << " " << label << "\n";
  }
  return dir;
}

}  // namespace loom::test
