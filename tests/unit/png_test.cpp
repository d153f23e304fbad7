// PNG: every chunk checked byte by byte (CRCs via zlib, IDAT inflated via zlib), an optional
// decode by Pillow when the system has it, and the grid layout of image_grid.
#include <gtest/gtest.h>

#include <unistd.h>
#include <zlib.h>
#include "temp_dir_test.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/diffusion/png.h"
#include "loom/ops/ops.h"

namespace {

namespace fs = std::filesystem;

class Png : public TempDirTest {};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

uint32_t u32_be(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | uint8_t(s[at + i]);
  return v;
}

struct Chunk {
  std::string type, data;
};

// Splits a PNG into chunks, checking the signature and every CRC on the way.
std::vector<Chunk> read_chunks(const std::string& png) {
  std::vector<Chunk> chunks;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t len = u32_be(png, at);
    Chunk c{png.substr(at + 4, 4), png.substr(at + 8, len)};
    const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(png.data() + at + 4), len + 4);
    EXPECT_EQ(u32_be(png, at + 8 + len), uint32_t(crc)) << "CRC of chunk " << c.type;
    chunks.push_back(c);
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size()) << "bytes after the last chunk";
  return chunks;
}

std::string inflate_all(const std::string& data, size_t expected_size) {
  std::string out(expected_size + 16, '\0');  // room to notice extra bytes
  uLongf size = out.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &size,
                       reinterpret_cast<const Bytef*>(data.data()), data.size()),
            Z_OK);
  out.resize(size);
  return out;
}

// The bytes PNG's IDAT must inflate to: each row prefixed with filter 0.
std::string filtered_rows(const std::vector<uint8_t>& pixels, int width, int height, int channels) {
  std::string out;
  const size_t row = size_t(width) * size_t(channels);
  for (int y = 0; y < height; ++y) {
    out += '\0';
    out.append(reinterpret_cast<const char*>(pixels.data()) + y * row, row);
  }
  return out;
}

TEST_F(Png, ChunksAndPixelsAreExact) {
  struct Case {
    int width, height, channels;
  };
  for (const Case& c : {Case{3, 2, 3}, Case{4, 3, 1}, Case{1, 1, 1}}) {
    std::vector<uint8_t> pixels(size_t(c.width * c.height * c.channels));
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 53 + 7);
    const std::string p = path("img.png");
    loom::write_png(p, pixels, c.width, c.height, c.channels);
    const std::vector<Chunk> chunks = read_chunks(read_bytes(p));
    ASSERT_EQ(chunks.size(), 3u);
    EXPECT_EQ(chunks[0].type, "IHDR");
    ASSERT_EQ(chunks[0].data.size(), 13u);
    EXPECT_EQ(u32_be(chunks[0].data, 0), uint32_t(c.width));
    EXPECT_EQ(u32_be(chunks[0].data, 4), uint32_t(c.height));
    // Bit depth 8; colour type 0 (gray) or 2 (RGB); deflate; adaptive filtering; no interlace.
    EXPECT_EQ(chunks[0].data.substr(8), std::string({8, char(c.channels == 1 ? 0 : 2), 0, 0, 0}));
    EXPECT_EQ(chunks[1].type, "IDAT");
    const std::string expected = filtered_rows(pixels, c.width, c.height, c.channels);
    EXPECT_EQ(inflate_all(chunks[1].data, expected.size()), expected);
    EXPECT_EQ(chunks[2].type, "IEND");
    EXPECT_TRUE(chunks[2].data.empty());
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(Png, PillowDecodesIt) {
  ASSERT_EQ(std::system("/usr/bin/python3 -c 'import PIL' >/dev/null 2>&1"), 0)
      << "python3-pil is not installed (scripts/bootstrap.sh installs it)";
  const std::vector<uint8_t> pixels = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
  const std::string p = path("rgb.png");
  loom::write_png(p, pixels, 2, 2, 3);
  const std::string cmd = "/usr/bin/python3 -c \"from PIL import Image; im = Image.open('" + p +
                          "'); im.load(); print(im.mode, im.size[0], im.size[1], "
                          "list(im.tobytes()))\"";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[512] = {};
  const size_t n = fread(buf, 1, sizeof(buf) - 1, pipe);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(std::string(buf, n), "RGB 2 2 [255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30]\n");
}

TEST_F(Png, RejectsBadArguments) {
  EXPECT_THROW(loom::write_png(path("a.png"), std::vector<uint8_t>(5), 2, 2, 1), loom::Error);
  EXPECT_THROW(loom::write_png(path("a.png"), std::vector<uint8_t>(8), 2, 2, 2), loom::Error);
  EXPECT_THROW(loom::write_png(path("a.png"), {}, 0, 0, 1), loom::Error);
  EXPECT_THROW(loom::write_png(path("no/dir/a.png"), std::vector<uint8_t>(4), 2, 2, 1),
               loom::Error);
  EXPECT_FALSE(fs::exists(path("a.png")));
  EXPECT_THROW(loom::image_grid(loom::zeros({2, 2, 4, 4}), 1, 2), loom::Error);  // 2 channels
  EXPECT_THROW(loom::image_grid(loom::zeros({5, 1, 4, 4}), 2, 2), loom::Error);  // 5 > 2x2
  EXPECT_THROW(loom::image_grid(loom::zeros({1, 4, 4}), 1, 1), loom::Error);     // not 4-D
}

TEST_F(Png, GridTilesRowMajorWithBlackPadding) {
  // Three 2x3 gray images in a 2x2 grid with padding 1: 9 wide, 7 high, last cell empty.
  const int h = 2, w = 3, pad = 1;
  std::vector<float> values;
  const float fills[3] = {1.0f, 0.0f, -1.0f};  // -> 255, 128, 0
  for (float f : fills) values.insert(values.end(), size_t(h * w), f);
  values[size_t(h * w + 1)] = 2.0f;  // clamped to 255
  values[size_t(h * w + 2)] = NAN;   // black
  const loom::ImageGrid grid = loom::image_grid(loom::from_vector(values, {3, 1, h, w}), 2, 2, pad);
  ASSERT_EQ(grid.width, 2 * (w + pad) + pad);
  ASSERT_EQ(grid.height, 2 * (h + pad) + pad);
  ASSERT_EQ(grid.channels, 1);
  ASSERT_EQ(grid.pixels.size(), size_t(9 * 7));
  const auto at = [&](int y, int x) { return int(grid.pixels[size_t(y * grid.width + x)]); };
  const std::vector<std::string> expected = {
      ".........",  // '#' 255, '+' 128, '0' 0 inside an image, '.' padding or empty cell
      ".###.+##.", ".###.+++.", ".........", ".000.....", ".000.....", ".........",
  };
  for (int y = 0; y < grid.height; ++y) {
    for (int x = 0; x < grid.width; ++x) {
      const char c = expected[size_t(y)][size_t(x)];
      int want = c == '#' ? 255 : c == '+' ? 128 : 0;
      if (y == 1 && x == 6) want = 255;  // the clamped 2.0
      if (y == 1 && x == 7) want = 0;    // the NaN
      EXPECT_EQ(at(y, x), want) << "pixel (" << y << ", " << x << ")";
    }
  }
}

// Row labels: a margin of 2 digits x 4 columns x scale 2 + 2 x padding on the left, the grid
// itself copied beside it, and each label's digits (3x5, scaled 2x) at the row's middle:
// "7" is a top bar and a right stem; "1" a stem with a flag; "0" a ring.
TEST_F(Png, LabelRowsWritesEachRowsClassToItsLeft) {
  const int h = 10, w = 1, pad = 1;
  const loom::ImageGrid grid = loom::image_grid(
      loom::from_vector(std::vector<float>(size_t(2 * h * w), 0.0f), {2, 1, h, w}), 2, 1, pad);
  const loom::ImageGrid out = loom::label_rows(grid, {7, 10}, h, pad);
  const int margin = 2 * 4 * 2 + 2 * pad;
  ASSERT_EQ(out.width, grid.width + margin);
  ASSERT_EQ(out.height, grid.height);
  const auto at = [&](int y, int x) { return int(out.pixels[size_t(y * out.width + x)]); };
  for (int y = 0; y < grid.height; ++y)
    for (int x = 0; x < grid.width; ++x)
      EXPECT_EQ(at(y, margin + x), int(grid.pixels[size_t(y * grid.width + x)])) << y << "," << x;
  // "7" in row 0 (its cell's rows 1..10): the bar on pixel rows 1-2, the stem at x 5-6 below.
  for (int x = 1; x <= 6; ++x) EXPECT_EQ(at(1, x), 255) << x;
  for (int y = 3; y <= 10; ++y) {
    EXPECT_EQ(at(y, 1), 0) << y;
    EXPECT_EQ(at(y, 4), 0) << y;
    EXPECT_EQ(at(y, 5), 255) << y;
    EXPECT_EQ(at(y, 6), 255) << y;
  }
  // "10" in row 1 (rows 12..21): "1" at x 1-6 (stem x 3-4, flag x 1-2 on its second row),
  // "0" at x 9-14 (bars top and bottom, hollow inside).
  EXPECT_EQ(at(12, 1), 0);
  EXPECT_EQ(at(12, 3), 255);
  EXPECT_EQ(at(14, 1), 255);
  EXPECT_EQ(at(20, 1), 255);  // the foot
  EXPECT_EQ(at(12, 9), 255);
  EXPECT_EQ(at(14, 11), 0);
  EXPECT_EQ(at(14, 13), 255);
  EXPECT_EQ(at(16, 11), 0);
  for (int y = 0; y < out.height; ++y)  // the padding between the digits and the grid stays black
    for (int x = 15; x < margin; ++x) EXPECT_EQ(at(y, x), 0) << y << "," << x;
  EXPECT_THROW(loom::label_rows(grid, {1}, h, pad), loom::Error);
  EXPECT_THROW(loom::label_rows(grid, {1, -2}, h, pad), loom::Error);
}

TEST_F(Png, GridInterleavesRgbAndWritesAPng) {
  // One 1x2 RGB image: pixel 0 = (1, -1, 0), pixel 1 = (-1, 1, 0.5); channel-major input.
  const loom::Tensor img =
      loom::to_dtype(loom::from_vector(std::vector<float>{1, -1, -1, 1, 0, 0.5f}, {1, 3, 1, 2}),
                     loom::DType::BF16);
  const loom::ImageGrid grid = loom::image_grid(img, 1, 1, 0);
  ASSERT_EQ(grid.width, 2);
  ASSERT_EQ(grid.height, 1);
  EXPECT_EQ(grid.pixels, (std::vector<uint8_t>{255, 0, 128, 0, 255, 191}));
  loom::write_png(path("grid.png"), grid.pixels, grid.width, grid.height, grid.channels);
  const std::vector<Chunk> chunks = read_chunks(read_bytes(path("grid.png")));
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(inflate_all(chunks[1].data, 7), filtered_rows(grid.pixels, 2, 1, 3));
}

}  // namespace
