#include "loom/diffusion/png.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "loom/core/atomic_file.h"
#include "loom/ops/creation.h"

namespace loom {

namespace {

void put_u32_be(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += char((v >> shift) & 0xff);
}

// A chunk is length, type, data, and a CRC-32 over type and data.
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  LOOM_CHECK(data.size() <= 0x7fffffffu) << "png: chunk " << type << " too large";
  put_u32_be(out, uint32_t(data.size()));
  const size_t crc_start = out.size();
  out.append(type, 4);
  out += data;
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(out.data() + crc_start),
                          uInt(out.size() - crc_start));
  put_u32_be(out, uint32_t(crc));
}

}  // namespace

void write_png(const std::string& path, const std::vector<uint8_t>& pixels, int width, int height,
               int channels) {
  try {
    write_file_atomic(path, encode_png(pixels, width, height, channels));
  } catch (const Error& e) {
    LOOM_FAIL() << "write_png '" << path << "': " << e.what();
  }
}

std::string encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels) {
  LOOM_CHECK(width > 0 && height > 0)
      << "png: size " << width << "x" << height << " must be positive";
  LOOM_CHECK(channels == 1 || channels == 3) << "png: " << channels << " channels, expected 1 or 3";
  const size_t row_bytes = size_t(width) * size_t(channels);
  LOOM_CHECK(pixels.size() == row_bytes * size_t(height))
      << "png: " << pixels.size() << " bytes of pixels, expected " << width << " x " << height
      << " x " << channels << " = " << row_bytes * size_t(height);

  // Every row is prefixed with filter type 0 (None): simple, and zlib does the compressing.
  std::string raw;
  raw.reserve((row_bytes + 1) * size_t(height));
  for (int y = 0; y < height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(pixels.data()) + size_t(y) * row_bytes, row_bytes);
  }
  uLongf compressed_size = compressBound(uLong(raw.size()));
  std::string compressed(compressed_size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_size,
                           reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()),
                           Z_DEFAULT_COMPRESSION);
  LOOM_CHECK(rc == Z_OK) << "png: zlib compress failed (code " << rc << ")";
  compressed.resize(compressed_size);

  std::string ihdr;
  put_u32_be(ihdr, uint32_t(width));
  put_u32_be(ihdr, uint32_t(height));
  ihdr += char(8);                      // bit depth
  ihdr += char(channels == 1 ? 0 : 2);  // colour type: grayscale or truecolour
  ihdr += std::string(3, '\0');         // compression deflate, filter adaptive, no interlace

  std::string file("\x89PNG\r\n\x1a\n", 8);
  put_chunk(file, "IHDR", ihdr);
  put_chunk(file, "IDAT", compressed);
  put_chunk(file, "IEND", "");
  return file;
}

ImageGrid image_grid(const Tensor& images, int rows, int cols, int padding) {
  LOOM_CHECK(images.dim() == 4) << "image_grid: images of shape " << images.shape()
                                << ", expected (N, C, H, W)";
  LOOM_CHECK(is_floating(images.dtype()))
      << "image_grid: images of dtype " << dtype_name(images.dtype()) << ", expected floating";
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  LOOM_CHECK(c == 1 || c == 3) << "image_grid: " << c << " channels, expected 1 or 3";
  LOOM_CHECK(rows > 0 && cols > 0 && padding >= 0)
      << "image_grid: rows " << rows << ", cols " << cols << ", padding " << padding
      << " (expected rows, cols > 0 and padding >= 0)";
  LOOM_CHECK(n <= int64_t(rows) * cols)
      << "image_grid: " << n << " images do not fit a " << rows << "x" << cols << " grid";

  ImageGrid grid;
  grid.channels = int(c);
  grid.width = int(cols * (w + padding) + padding);
  grid.height = int(rows * (h + padding) + padding);
  grid.pixels.assign(size_t(grid.width) * size_t(grid.height) * size_t(c), 0);

  const std::vector<float> values = to_vector(images);  // (N, C, H, W) on the host, as f32
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x0 = padding + (i % cols) * (w + padding);
    const int64_t y0 = padding + (i / cols) * (h + padding);
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const float v = values[size_t(((i * c + ch) * h + y) * w + x)];
          // [-1, 1] -> [0, 255]; !(v > -1) also sends NaN to black.
          const float scaled = !(v > -1.0f) ? 0.0f : v >= 1.0f ? 255.0f : (v + 1.0f) * 127.5f;
          const size_t at = (size_t(y0 + y) * size_t(grid.width) + size_t(x0 + x)) * size_t(c);
          grid.pixels[at + size_t(ch)] = uint8_t(std::lround(scaled));
        }
      }
    }
  }
  return grid;
}

namespace {
// Digits 0-9 in 3x5 pixels: five rows of three bits each, the high bit leftmost.
constexpr uint8_t kDigits[10][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}};
constexpr int kScale = 2;
}  // namespace

ImageGrid label_rows(const ImageGrid& grid, const std::vector<int64_t>& labels, int cell_height,
                     int padding) {
  LOOM_CHECK(grid.height == int(labels.size()) * (cell_height + padding) + padding)
      << "label_rows: " << labels.size() << " labels for a grid " << grid.height
      << " pixels high with cells of " << cell_height;
  size_t digits = 1;
  for (int64_t label : labels) {
    LOOM_CHECK(label >= 0) << "label_rows: a negative label " << label;
    digits = std::max(digits, std::to_string(label).size());
  }
  const int margin = int(digits) * 4 * kScale + 2 * padding;
  ImageGrid out;
  out.channels = grid.channels;
  out.width = grid.width + margin;
  out.height = grid.height;
  out.pixels.assign(size_t(out.width) * size_t(out.height) * size_t(out.channels), 0);
  const size_t c = size_t(grid.channels);
  for (int y = 0; y < grid.height; ++y)
    std::copy_n(&grid.pixels[size_t(y) * size_t(grid.width) * c], size_t(grid.width) * c,
                &out.pixels[(size_t(y) * size_t(out.width) + size_t(margin)) * c]);
  for (size_t row = 0; row < labels.size(); ++row) {
    const std::string text = std::to_string(labels[row]);
    const int top = padding + int(row) * (cell_height + padding) + (cell_height - 5 * kScale) / 2;
    for (size_t d = 0; d < text.size(); ++d)
      for (int gy = 0; gy < 5 * kScale; ++gy)
        for (int gx = 0; gx < 3 * kScale; ++gx) {
          if (!((kDigits[text[d] - '0'][gy / kScale] >> (2 - gx / kScale)) & 1)) continue;
          const int x = padding + int(d) * 4 * kScale + gx, y = top + gy;
          if (y < 0 || y >= out.height) continue;
          for (size_t ch = 0; ch < c; ++ch)
            out.pixels[(size_t(y) * size_t(out.width) + size_t(x)) * c + ch] = 255;
        }
  }
  return out;
}

}  // namespace loom
