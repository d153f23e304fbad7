// IDX reading: synthetic gzipped and plain files read back exactly, every malformed-file case
// throws an error naming the file, and the real Fashion-MNIST test split is checked if present.
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "expect_error.h"

#include "temp_dir_test.h"

#include "loom/data/idx.h"
#include "loom/ops/creation.h"

namespace {

namespace fs = std::filesystem;

void append_u32_be(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += char((v >> shift) & 0xff);
}

std::string images_bytes(uint32_t n, uint32_t h, uint32_t w, const std::vector<uint8_t>& pixels,
                         uint32_t magic = 0x00000803) {
  std::string out;
  append_u32_be(out, magic);
  append_u32_be(out, n);
  append_u32_be(out, h);
  append_u32_be(out, w);
  out.append(pixels.begin(), pixels.end());
  return out;
}

std::string labels_bytes(const std::vector<uint8_t>& labels, uint32_t count) {
  std::string out;
  append_u32_be(out, 0x00000801);
  append_u32_be(out, count);
  out.append(labels.begin(), labels.end());
  return out;
}

void write_plain(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gzip(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

class DataIdx : public TempDirTest {};

// 3 images of 2 x 4 pixels covering 0 and 255.
const std::vector<uint8_t> kPixels = [] {
  std::vector<uint8_t> p(3 * 2 * 4);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i * 37 % 256);
  p[5] = 255;
  return p;
}();
const std::vector<uint8_t> kLabels = {0, 9, 3};

void expect_matches(const loom::ImageDataset& ds) {
  ASSERT_EQ(ds.images.shape(), (loom::Shape{3, 1, 2, 4}));
  ASSERT_EQ(ds.images.dtype(), loom::DType::F32);
  ASSERT_EQ(ds.labels.shape(), (loom::Shape{3}));
  ASSERT_EQ(ds.labels.dtype(), loom::DType::I64);
  EXPECT_EQ(ds.num_classes, 10);
  const std::vector<float> images = loom::to_vector(ds.images);
  for (size_t i = 0; i < kPixels.size(); ++i)
    EXPECT_EQ(images[i], float(kPixels[i]) / 127.5f - 1.0f) << "pixel " << i;
  EXPECT_EQ(images[0], -1.0f);  // pixel 0
  EXPECT_EQ(images[5], 1.0f);   // pixel 255
  EXPECT_EQ(loom::to_vector_i64(ds.labels), (std::vector<int64_t>{0, 9, 3}));
}

TEST_F(DataIdx, ReadsGzippedFilesExactly) {
  write_gzip(path("img.gz"), images_bytes(3, 2, 4, kPixels));
  write_gzip(path("lab.gz"), labels_bytes(kLabels, 3));
  expect_matches(loom::load_idx(path("img.gz"), path("lab.gz")));
}

TEST_F(DataIdx, ReadsPlainFilesExactly) {
  write_plain(path("img"), images_bytes(3, 2, 4, kPixels));
  write_plain(path("lab"), labels_bytes(kLabels, 3));
  expect_matches(loom::load_idx(path("img"), path("lab")));
}

TEST_F(DataIdx, TruncatedPixelsNameTheFileAndSizes) {
  std::vector<uint8_t> short_pixels(kPixels.begin(), kPixels.begin() + 10);
  write_gzip(path("img.gz"), images_bytes(3, 2, 4, short_pixels));
  write_gzip(path("lab.gz"), labels_bytes(kLabels, 3));
  expect_error([&] { loom::load_idx(path("img.gz"), path("lab.gz")); },
               {path("img.gz"), "expected N*H*W", "24 bytes of pixel data", "file ends after 10"});
}

TEST_F(DataIdx, TruncatedLabelsAndHeader) {
  write_gzip(path("img.gz"), images_bytes(3, 2, 4, kPixels));
  write_gzip(path("lab.gz"), labels_bytes({0, 1}, 3));
  expect_error([&] { loom::load_idx(path("img.gz"), path("lab.gz")); },
               {path("lab.gz"), "label data", "file ends after 2"});
  write_plain(path("stub"), std::string("\0\0", 2));
  expect_error([&] { loom::load_idx(path("stub"), path("lab.gz")); }, {path("stub"), "header"});
}

TEST_F(DataIdx, BadMagicNamesTheFile) {
  write_gzip(path("lab.gz"), labels_bytes(kLabels, 3));
  // A labels file passed as images: its magic is 0x801, not 0x803.
  expect_error([&] { loom::load_idx(path("lab.gz"), path("lab.gz")); },
               {path("lab.gz"), "0x00000801", "expected 0x00000803"});
  write_gzip(path("img.gz"), images_bytes(3, 2, 4, kPixels));
  expect_error([&] { loom::load_idx(path("img.gz"), path("img.gz")); },
               {path("img.gz"), "0x00000803", "expected 0x00000801"});
}

TEST_F(DataIdx, MissingFileNamesThePath) {
  write_gzip(path("lab.gz"), labels_bytes(kLabels, 3));
  expect_error([&] { loom::load_idx(path("nope.gz"), path("lab.gz")); }, {path("nope.gz")});
  write_gzip(path("img.gz"), images_bytes(3, 2, 4, kPixels));
  expect_error([&] { loom::load_idx(path("img.gz"), path("nope2.gz")); }, {path("nope2.gz")});
}

TEST_F(DataIdx, CountMismatchAndLabelRange) {
  write_gzip(path("img.gz"), images_bytes(3, 2, 4, kPixels));
  write_gzip(path("lab2.gz"), labels_bytes({0, 1}, 2));
  expect_error([&] { loom::load_idx(path("img.gz"), path("lab2.gz")); },
               {path("lab2.gz"), "2 labels", "3 images"});
  write_gzip(path("lab.gz"), labels_bytes(kLabels, 3));
  expect_error([&] { loom::load_idx(path("img.gz"), path("lab.gz"), 5); },
               {path("lab.gz"), "label 9", "[0, 5)"});
}

TEST_F(DataIdx, FashionMnistTestSplit) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  // scripts/bootstrap.sh installs the package, so its absence is a failure, not a skip.
  ASSERT_TRUE(fs::exists(dir + "/t10k-images-idx3-ubyte.gz"))
      << dir << " is absent; install dataset-fashion-mnist (scripts/bootstrap.sh does)";
  const loom::ImageDataset ds = loom::fashion_mnist(dir, /*train=*/false);
  ASSERT_EQ(ds.images.shape(), (loom::Shape{10000, 1, 28, 28}));
  ASSERT_EQ(ds.labels.shape(), (loom::Shape{10000}));
  std::vector<int64_t> per_class(10, 0);
  for (int64_t label : loom::to_vector_i64(ds.labels)) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[size_t(label)];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[size_t(c)], 1000) << "class " << c;
  const float* px = ds.images.data<float>();
  float lo = 1.0f, hi = -1.0f;
  for (int64_t i = 0; i < ds.images.numel(); ++i)
    lo = std::min(lo, px[i]), hi = std::max(hi, px[i]);
  EXPECT_EQ(lo, -1.0f);
  EXPECT_EQ(hi, 1.0f);
}

}  // namespace
