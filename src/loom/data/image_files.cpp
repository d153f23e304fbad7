#include "loom/data/image_files.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <spng.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>

#include "loom/core/error.h"
#include "loom/data/text.h"
#include "loom/ops/creation.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

std::string read_at(const std::string& path, int64_t offset, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0) << "image data: cannot open " << path << ": " << std::strerror(errno);
  std::string out(size_t(bytes), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, off_t(offset + int64_t(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  LOOM_CHECK(done == out.size()) << "image data: " << path << " ended before byte "
                                 << offset + bytes << " (truncated?)";
  return out;
}

int64_t parse_label(const std::string& text, int64_t classes, const std::string& where) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  LOOM_CHECK(ec == std::errc() && end == t.data() + t.size() && v >= 0 && v < classes)
      << "image data: " << where << ": label '" << t << "' is not an integer in [0, " << classes
      << ")";
  return v;
}

// The key of a webdataset member ("a/b/sample01.seg.png" -> "a/b/sample01") and its extension
// after that first dot ("seg.png").
std::pair<std::string, std::string> split_key(const std::string& member) {
  const size_t slash = member.rfind('/');
  const size_t dot = member.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {member, ""};
  return {member.substr(0, dot), member.substr(dot + 1)};
}

}  // namespace

ImageFiles::ImageFiles(const std::string& path, int64_t channels, int64_t size, int64_t classes)
    : channels_(channels), size_(size), classes_(classes), source_(path) {
  LOOM_CHECK(channels == 1 || channels == 3)
      << "image data: " << channels << " channels, expected 1 or 3";
  if (fs::is_directory(path) && fs::is_regular_file(fs::path(path) / "labels.txt")) {
    open_folder(path);
  } else if (fs::is_directory(path)) {
    std::vector<std::string> shards;
    for (const auto& f : fs::directory_iterator(path))
      if (f.path().extension() == ".tar") shards.push_back(f.path().string());
    std::sort(shards.begin(), shards.end());
    LOOM_CHECK(!shards.empty())
        << "image data: " << path
        << " has neither labels.txt (a folder of PNG files) nor .tar shards";
    for (const std::string& s : shards) open_shard(s);
  } else {
    LOOM_CHECK(fs::is_regular_file(path)) << "image data: " << path << " does not exist";
    open_shard(path);
  }
  LOOM_CHECK(!samples_.empty()) << "image data: " << path << " holds no images";
  for (const Sample& s : samples_) check_header(s);
}

void ImageFiles::open_folder(const std::string& dir) {
  const std::string labels = (fs::path(dir) / "labels.txt").string();
  const std::string text = read_text_file(labels);
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    const std::string where = labels + ", line " + std::to_string(line_no);
    LOOM_CHECK(space != std::string::npos && space > 0)
        << "image data: " << where << ": '" << line << "' is not 'path.png LABEL'";
    const std::string file = (fs::path(dir) / line.substr(0, space)).string();
    const int64_t label = parse_label(line.substr(space + 1), classes_, where);
    LOOM_CHECK(fs::is_regular_file(file))
        << "image data: " << where << ": " << file << " does not exist";
    files_.push_back(file);
    samples_.push_back({int32_t(files_.size() - 1), 0, int64_t(fs::file_size(file)), label, file});
  }
}

void ImageFiles::open_shard(const std::string& path) {
  files_.push_back(path);
  const int32_t file = int32_t(files_.size() - 1);
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);  // uncompressed only: members are read in place
  struct Partial {
    int64_t offset = -1, bytes = 0, label = -1;
    std::string png;
  };
  std::map<std::string, Partial> by_key;
  std::vector<std::string> order;
  try {
    LOOM_CHECK(archive_read_open_filename(a, path.c_str(), 1 << 16) == ARCHIVE_OK)
        << "image data: " << path
        << " is not an uncompressed tar file: " << archive_error_string(a);
    archive_entry* entry = nullptr;
    int rc;
    while ((rc = archive_read_next_header(a, &entry)) == ARCHIVE_OK) {
      if (archive_entry_filetype(entry) != AE_IFREG) continue;
      const std::string member = archive_entry_pathname(entry);
      const auto [key, ext] = split_key(member);
      const std::string where = path + ":" + member;
      if (!by_key.count(key)) order.push_back(key);
      Partial& p = by_key[key];
      if (ext == "png") {
        LOOM_CHECK(p.offset < 0) << "image data: " << where << ": a second .png for key " << key;
        p.offset = archive_filter_bytes(a, 0);  // where the member's data starts in the file
        p.bytes = archive_entry_size(entry);
        p.png = member;
      } else if (ext == "cls") {
        char buf[64] = {};
        const la_ssize_t n = archive_read_data(a, buf, sizeof buf - 1);
        LOOM_CHECK(n >= 0) << "image data: " << where << ": " << archive_error_string(a);
        p.label = parse_label(std::string(buf, size_t(n)), classes_, where);
      }
    }
    LOOM_CHECK(rc == ARCHIVE_EOF) << "image data: " << path
                                  << ": a bad entry: " << archive_error_string(a);
  } catch (...) {
    archive_read_free(a);
    throw;
  }
  archive_read_free(a);
  for (const std::string& key : order) {
    const Partial& p = by_key[key];
    LOOM_CHECK(p.offset >= 0 && p.label >= 0)
        << "image data: " << path << ": sample " << key << " lacks its "
        << (p.offset < 0 ? ".png" : ".cls") << " member";
    samples_.push_back({file, p.offset, p.bytes, p.label, path + ":" + p.png});
  }
}

void ImageFiles::check_header(const Sample& s) const {
  // The signature and IHDR (33 bytes) say the size and colour type.
  const std::string head =
      read_at(files_[size_t(s.file)], s.offset, std::min<int64_t>(s.bytes, 33));
  LOOM_CHECK(head.size() == 33 && head.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0 &&
             head.compare(12, 4, "IHDR") == 0)
      << "image data: " << s.name << " is not a PNG file";
  auto be32 = [&](size_t at) {
    return uint32_t(uint8_t(head[at])) << 24 | uint32_t(uint8_t(head[at + 1])) << 16 |
           uint32_t(uint8_t(head[at + 2])) << 8 | uint8_t(head[at + 3]);
  };
  const int64_t w = be32(16), h = be32(20), color = uint8_t(head[25]);
  LOOM_CHECK(w == size_ && h == size_) << "image data: " << s.name << " is " << w << "x" << h
                                       << ", the model takes " << size_ << "x" << size_;
  LOOM_CHECK(channels_ == 3 || color == 0)
      << "image data: " << s.name << " is a colour PNG, but model.channels is 1";
}

std::pair<Tensor, Tensor> ImageFiles::read(const std::vector<int64_t>& indices) const {
  const int64_t n = int64_t(indices.size()), plane = size_ * size_;
  std::vector<float> pixels(size_t(n * channels_ * plane));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::vector<uint8_t> decoded(size_t(channels_ * plane));
  for (int64_t i = 0; i < n; ++i) {
    const Sample& s = samples_.at(size_t(indices[size_t(i)]));
    const std::string png = read_at(files_[size_t(s.file)], s.offset, s.bytes);
    spng_ctx* ctx = spng_ctx_new(0);
    const int fmt = channels_ == 1 ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
    int rc = spng_set_png_buffer(ctx, png.data(), png.size());
    if (rc == 0) rc = spng_decode_image(ctx, decoded.data(), decoded.size(), fmt, 0);
    spng_ctx_free(ctx);
    LOOM_CHECK(rc == 0) << "image data: " << s.name << ": " << spng_strerror(rc);
    // (H, W, C) bytes -> (C, H, W) in [-1, 1]
    float* out = pixels.data() + i * channels_ * plane;
    for (int64_t c = 0; c < channels_; ++c)
      for (int64_t p = 0; p < plane; ++p)
        out[c * plane + p] = float(decoded[size_t(p * channels_ + c)]) / 127.5f - 1.0f;
    labels[size_t(i)] = s.label;
  }
  return {from_vector(pixels, {n, channels_, size_, size_}), from_vector(labels, {n})};
}

}  // namespace loom
