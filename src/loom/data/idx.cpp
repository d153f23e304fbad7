#include "loom/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace loom {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8 data, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8 data, 1 dim

// A gzip file opened for reading; zlib passes plain files through unchanged.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    // gzopen succeeds on unreadable directories etc. only to fail later; check the file first
    // so the common "wrong path" error is the clear one.
    LOOM_CHECK(std::filesystem::is_regular_file(path))
        << "IDX file " << path << " does not exist or is not a regular file";
    file_ = gzopen(path.c_str(), "rb");
    LOOM_CHECK(file_ != nullptr) << "cannot open IDX file " << path << ": " << std::strerror(errno);
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into out; returns how many arrived before the end of the data.
  size_t read(uint8_t* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      // gzread takes an unsigned count and returns int, so large reads go in chunks.
      const unsigned chunk = unsigned(std::min<size_t>(n - done, size_t(1) << 30));
      const int got = gzread(file_, out + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        LOOM_CHECK(false) << "reading IDX file " << path_
                          << " failed (corrupt gzip data?): " << msg;
      }
      if (got == 0) break;
      done += size_t(got);
    }
    return done;
  }

  uint32_t read_u32_be(const char* what) {
    uint8_t b[4];
    const size_t got = read(b, 4);
    LOOM_CHECK(got == 4) << "IDX file " << path_ << " ends inside its header (reading " << what
                         << "); is it an IDX file?";
    return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
  }

  // Reads exactly n bytes of payload, in pieces: a corrupt header that claims terabytes fails
  // on the missing data instead of on a huge allocation up front.
  // `count_desc` spells out how n was computed ("N*H*W = 2*3*4"), `kind` names the data.
  std::vector<uint8_t> read_payload(uint64_t n, const std::string& count_desc, const char* kind) {
    std::vector<uint8_t> data;
    constexpr size_t kPiece = size_t(1) << 24;
    while (data.size() < n) {
      const size_t want = size_t(std::min<uint64_t>(n - data.size(), kPiece));
      const size_t old = data.size();
      data.resize(old + want);
      const size_t got = read(data.data() + old, want);
      LOOM_CHECK(got == want) << "IDX file " << path_ << " is truncated: expected " << count_desc
                              << " = " << n << " bytes of " << kind << " data, file ends after "
                              << old + got;
    }
    return data;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

void check_magic(GzReader& in, const std::string& path, uint32_t expected, const char* kind) {
  const uint32_t magic = in.read_u32_be("magic number");
  LOOM_CHECK(magic == expected) << path << " is not an IDX " << kind << " file: magic number "
                                << hex32(magic) << ", expected " << hex32(expected);
}

}  // namespace

ImageDataset load_idx(const std::string& images_path, const std::string& labels_path,
                      int64_t num_classes) {
  LOOM_CHECK(num_classes > 0 && num_classes <= 256)
      << "load_idx: num_classes = " << num_classes << ", expected 1..256 (labels are bytes)";

  GzReader images_in(images_path);
  check_magic(images_in, images_path, kImagesMagic, "images");
  const uint64_t n = images_in.read_u32_be("image count");
  const uint64_t h = images_in.read_u32_be("image height");
  const uint64_t w = images_in.read_u32_be("image width");
  LOOM_CHECK(h > 0 && w > 0) << "IDX file " << images_path << " has images of " << h << " x " << w
                             << " pixels, expected both sizes > 0";
  // Dims are u32, so their product could overflow 64 bits; bounding h * w and the total
  // keeps every product exact and rejects headers no real dataset has.
  LOOM_CHECK(h * w < (uint64_t(1) << 31) && n * h * w < (uint64_t(1) << 40))
      << "IDX file " << images_path << " claims " << n << " images of " << h << " x " << w
      << " pixels, which is implausibly large";
  const std::vector<uint8_t> pixels = images_in.read_payload(
      n * h * w, "N*H*W = " + std::to_string(n) + "*" + std::to_string(h) + "*" + std::to_string(w),
      "pixel");

  GzReader labels_in(labels_path);
  check_magic(labels_in, labels_path, kLabelsMagic, "labels");
  const uint64_t n_labels = labels_in.read_u32_be("label count");
  LOOM_CHECK(n_labels == n) << "labels file " << labels_path << " holds " << n_labels
                            << " labels but images file " << images_path << " holds " << n
                            << " images";
  const std::vector<uint8_t> label_bytes = labels_in.read_payload(n, "N", "label");

  ImageDataset ds;
  ds.num_classes = num_classes;
  ds.images = Tensor::empty({int64_t(n), 1, int64_t(h), int64_t(w)}, DType::F32, cpu_device(),
                            MemCategory::Other);  // (N, 1, H, W): data, not activations
  float* img = ds.images.data<float>();
  for (size_t i = 0; i < pixels.size(); ++i) img[i] = float(pixels[i]) / 127.5f - 1.0f;

  ds.labels = Tensor::empty({int64_t(n)}, DType::I64, cpu_device(), MemCategory::Other);  // (N)
  int64_t* lab = ds.labels.data<int64_t>();
  for (size_t i = 0; i < label_bytes.size(); ++i) {
    LOOM_CHECK(label_bytes[i] < num_classes)
        << "labels file " << labels_path << ": label " << int(label_bytes[i]) << " at index " << i
        << " is outside [0, " << num_classes << ")";
    lab[i] = label_bytes[i];
  }
  return ds;
}

ImageDataset fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  auto pick = [&](const std::string& stem) {
    const std::filesystem::path gz = std::filesystem::path(dir) / (stem + ".gz");
    const std::filesystem::path plain = std::filesystem::path(dir) / stem;
    // Prefer the shipped .gz; fall back to an unpacked copy, else report the .gz name.
    return (!std::filesystem::exists(gz) && std::filesystem::exists(plain)) ? plain.string()
                                                                            : gz.string();
  };
  return load_idx(pick(prefix + "-images-idx3-ubyte"), pick(prefix + "-labels-idx1-ubyte"), 10);
}

}  // namespace loom
