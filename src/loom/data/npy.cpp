#include "loom/data/npy.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "loom/core/atomic_file.h"
#include "loom/ops/creation.h"
#include "loom/ops/shape.h"

namespace loom {
namespace {

// The .npy payload is little-endian and copied raw; a big-endian host would need swapping.
static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then major and minor version bytes
constexpr size_t kMagicLen = 6;

const char* descr_of(DType dtype) {
  if (dtype == DType::F32) return "<f4";
  if (dtype == DType::I64) return "<i8";
  if (dtype == DType::U8) return "|u1";
  return nullptr;
}

// The header dict as NumPy writes it: "{'descr': '<f4', 'fortran_order': False, 'shape': (2,
// 3), }", then spaces and '\n' so that magic + version + length + dict is a multiple of 64.
std::string header_dict(const char* descr, const Shape& shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dict += ",";  // a 1-tuple in Python syntax
  dict += "), }";
  const size_t prefix = kMagicLen + 2 + 2;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  return dict;
}

// Minimal reader of the header dict: finds `'key':` and returns the text after it.
class HeaderDict {
 public:
  HeaderDict(std::string text, std::string path) : text_(std::move(text)), path_(std::move(path)) {}

  std::string_view value_of(const std::string& key) const {
    size_t at = text_.find("'" + key + "'");
    if (at == std::string::npos) at = text_.find("\"" + key + "\"");
    LOOM_CHECK(at != std::string::npos)
        << "npy file " << path_ << ": header has no '" << key << "' entry: " << text_;
    at = text_.find(':', at);
    LOOM_CHECK(at != std::string::npos) << "npy file " << path_ << ": malformed header " << text_;
    std::string_view rest(text_);
    rest.remove_prefix(at + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    return rest;
  }

  std::string string_of(const std::string& key) const {
    std::string_view v = value_of(key);
    const char quote = v.empty() ? 0 : v.front();
    const size_t end = (quote == '\'' || quote == '"') ? v.find(quote, 1) : std::string::npos;
    LOOM_CHECK(end != std::string::npos)
        << "npy file " << path_ << ": '" << key << "' is not a quoted string in header " << text_;
    return std::string(v.substr(1, end - 1));
  }

  bool bool_of(const std::string& key) const {
    std::string_view v = value_of(key);
    if (v.substr(0, 4) == "True") return true;
    LOOM_CHECK(v.substr(0, 5) == "False")
        << "npy file " << path_ << ": '" << key << "' is not True or False in header " << text_;
    return false;
  }

  Shape shape_of(const std::string& key) const {
    std::string_view v = value_of(key);
    const size_t close = v.find(')');
    LOOM_CHECK(!v.empty() && v.front() == '(' && close != std::string::npos)
        << "npy file " << path_ << ": '" << key << "' is not a tuple in header " << text_;
    Shape shape;
    std::string_view items = v.substr(1, close - 1);
    while (!items.empty()) {
      const size_t comma = items.find(',');
      std::string_view item = items.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (!item.empty()) {
        int64_t dim = 0;
        for (char c : item) {
          LOOM_CHECK(c >= '0' && c <= '9' && dim < (int64_t(1) << 50))
              << "npy file " << path_ << ": bad dimension '" << item << "' in header " << text_;
          dim = dim * 10 + (c - '0');
        }
        shape.push_back(dim);
      }
      if (comma == std::string_view::npos) break;
      items.remove_prefix(comma + 1);
    }
    return shape;
  }

 private:
  std::string text_;
  std::string path_;
};

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  const char* descr = descr_of(t.dtype());
  LOOM_CHECK(descr != nullptr) << "write_npy " << path << ": dtype " << dtype_name(t.dtype())
                               << " is not supported, expected f32, i64 or u8";
  const std::string dict = header_dict(descr, t.shape());
  const uint16_t header_len = uint16_t(dict.size());
  const char prefix[] = {
      '\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, char(header_len & 0xff), char(header_len >> 8)};

  AtomicFile out(path);
  out.write(prefix, sizeof(prefix));
  out.write(dict);
  if (t.is_contiguous() && t.device() == cpu_device()) {
    out.write(t.data_ptr(), t.nbytes());
  } else if (t.dtype() == DType::U8) {
    const Tensor host = contiguous(to_device(t, cpu_device()));
    out.write(host.data_ptr(), host.nbytes());
  } else if (t.dtype() == DType::F32) {
    const std::vector<float> values = to_vector(t);  // row-major host copy
    out.write(values.data(), values.size() * sizeof(float));
  } else {
    const std::vector<int64_t> values = to_vector_i64(t);
    out.write(values.data(), values.size() * sizeof(int64_t));
  }
  out.commit();
}

Tensor read_npy(const std::string& path) {
  LOOM_CHECK(std::filesystem::is_regular_file(path))
      << "npy file " << path << " does not exist or is not a regular file";
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in) << "cannot open npy file " << path << ": " << std::strerror(errno);
  const uint64_t file_size = std::filesystem::file_size(path);

  unsigned char lead[kMagicLen + 2];
  in.read(reinterpret_cast<char*>(lead), sizeof(lead));
  LOOM_CHECK(in && std::memcmp(lead, kMagic, kMagicLen) == 0)
      << "npy file " << path << ": does not start with the magic \"\\x93NUMPY\"";
  const int major = lead[kMagicLen];
  LOOM_CHECK(major >= 1 && major <= 3)
      << "npy file " << path << ": format version " << major << "." << int(lead[kMagicLen + 1])
      << " is not supported, expected 1.x, 2.x or 3.x";
  // Version 1 stores the header length in 2 bytes, versions 2 and 3 in 4 (little-endian).
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  const size_t len_size = major == 1 ? 2 : 4;
  in.read(reinterpret_cast<char*>(len_bytes), std::streamsize(len_size));
  const uint64_t header_len = uint64_t(len_bytes[0]) | uint64_t(len_bytes[1]) << 8 |
                              uint64_t(len_bytes[2]) << 16 | uint64_t(len_bytes[3]) << 24;
  const uint64_t data_start = sizeof(lead) + len_size + header_len;
  LOOM_CHECK(in && data_start <= file_size)
      << "npy file " << path << ": truncated header (file has " << file_size << " bytes)";
  std::string header(header_len, '\0');
  in.read(header.data(), std::streamsize(header_len));
  LOOM_CHECK(in) << "npy file " << path << ": reading the header failed";

  const HeaderDict dict(header, path);
  const std::string descr = dict.string_of("descr");
  LOOM_CHECK(descr == "<f4" || descr == "<i8" || descr == "|u1")
      << "npy file " << path << ": dtype '" << descr
      << "' is not supported, expected '<f4' (f32), '<i8' (i64) or '|u1' (u8)";
  const DType dtype = descr == "<f4" ? DType::F32 : descr == "<i8" ? DType::I64 : DType::U8;
  LOOM_CHECK(!dict.bool_of("fortran_order"))
      << "npy file " << path << ": Fortran-order arrays are not supported, expected C order";
  const Shape shape = dict.shape_of("shape");

  const uint64_t expected = uint64_t(shape_numel(shape)) * dtype_size(dtype);
  LOOM_CHECK(file_size - data_start == expected)
      << "npy file " << path << ": shape " << shape << " needs " << expected
      << " bytes of data, file has " << file_size - data_start;
  Tensor t = Tensor::empty(shape, dtype);
  in.read(static_cast<char*>(t.data_ptr()), std::streamsize(expected));
  LOOM_CHECK(in || expected == 0) << "npy file " << path << ": reading the data failed";
  return t;
}

}  // namespace loom
