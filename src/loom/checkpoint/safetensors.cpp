#include "loom/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include "loom/backend/backend.h"
#include "loom/core/atomic_file.h"
#include "loom/core/json.h"

namespace loom {

// The format is little-endian and Loom copies tensor bytes verbatim.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

constexpr DType kAllDtypes[] = {DType::F32,    DType::BF16, DType::F16, DType::F8E4M3,
                                DType::F8E5M2, DType::I32,  DType::I64, DType::U8};
// The reference implementation refuses larger headers too; a corrupt length must not make us
// allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

std::string dtype_list() {
  std::string out;
  for (DType d : kAllDtypes)
    out += (out.empty() ? "" : ", ") + std::string(safetensors_dtype_name(d));
  return out;
}

// A tensor's bytes as a contiguous host block: the tensor itself when it already is one.
Tensor host_contiguous(const Tensor& t) {
  if (t.device() == cpu_device() && t.is_contiguous()) return t;
  Tensor host = Tensor::empty(t.shape(), t.dtype(), cpu_device());
  backend_for(t.device()).copy(t, host);
  return host;
}

// A read-only file descriptor that closes itself.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    LOOM_CHECK(fd_ >= 0) << "safetensors: cannot open '" << path << "': " << std::strerror(errno);
    struct stat st;
    LOOM_CHECK(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode))
        << "safetensors: '" << path << "' is not a regular file";
    size_ = uint64_t(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* out, uint64_t nbytes) const {
    char* p = static_cast<char*>(out);
    while (nbytes > 0) {
      const ssize_t n =
          ::pread(fd_, p, std::min<uint64_t>(nbytes, uint64_t(1) << 30), off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      LOOM_CHECK(n > 0) << "safetensors: reading '" << path_ << "' at byte " << offset
                        << " failed: " << (n < 0 ? std::strerror(errno) : "unexpected end of file");
      p += n;
      offset += uint64_t(n);
      nbytes -= uint64_t(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Validates one header entry; every message names the file and the tensor.
Entry parse_entry(const std::string& path, const std::string& name, const Json& spec) {
  const std::string where = "safetensors file '" + path + "': tensor '" + name + "'";
  LOOM_CHECK(spec.is_object()) << where << " is " << Json::type_name(spec.type())
                               << ", expected an object with dtype, shape and data_offsets";
  for (const auto& [key, value] : spec.items()) {
    LOOM_CHECK(key == "dtype" || key == "shape" || key == "data_offsets")
        << where << " has unknown key '" << key << "' (expected dtype, shape, data_offsets)";
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    LOOM_CHECK(spec.contains(key)) << where << " has no '" << key << "'";
  }

  Entry e;
  e.name = name;
  const Json& dtype = spec.at("dtype");
  LOOM_CHECK(dtype.is_string()) << where << ": dtype is " << Json::type_name(dtype.type())
                                << ", expected a string";
  bool known = false;
  for (DType d : kAllDtypes) {
    if (dtype.as_string() == safetensors_dtype_name(d)) {
      e.dtype = d;
      known = true;
    }
  }
  LOOM_CHECK(known) << where << " has unsupported dtype '" << dtype.as_string() << "' (Loom reads "
                    << dtype_list() << ")";

  const Json& shape = spec.at("shape");
  LOOM_CHECK(shape.is_array()) << where << ": shape is " << Json::type_name(shape.type())
                               << ", expected an array of sizes";
  uint64_t numel = 1;
  for (const Json& d : shape.as_array()) {
    LOOM_CHECK(d.is_int() && d.as_int() >= 0)
        << where << ": shape " << shape.dump() << " must hold non-negative integers";
    e.shape.push_back(d.as_int());
    LOOM_CHECK(!__builtin_mul_overflow(numel, uint64_t(d.as_int()), &numel))
        << where << ": shape " << shape.dump() << " has too many elements";
  }
  uint64_t nbytes = 0;
  LOOM_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &nbytes) &&
             numel <= uint64_t(INT64_MAX))
      << where << ": shape " << shape.dump() << " has too many elements";

  const Json& offsets = spec.at("data_offsets");
  LOOM_CHECK(offsets.is_array() && offsets.size() == 2 && offsets.at(size_t(0)).is_int() &&
             offsets.at(size_t(1)).is_int() && offsets.at(size_t(0)).as_int() >= 0 &&
             offsets.at(size_t(1)).as_int() >= offsets.at(size_t(0)).as_int())
      << where << ": data_offsets " << offsets.dump()
      << " must be [begin, end] with 0 <= begin <= end";
  e.begin = uint64_t(offsets.at(size_t(0)).as_int());
  e.end = uint64_t(offsets.at(size_t(1)).as_int());
  LOOM_CHECK(e.end - e.begin == nbytes)
      << where << ": data_offsets " << offsets.dump() << " span " << (e.end - e.begin)
      << " bytes, but dtype " << dtype.as_string() << " and shape " << e.shape << " need "
      << nbytes;
  return e;
}

// The tensors must tile [0, buffer_size) exactly, as the reference implementation requires.
void check_layout(const std::string& path, std::vector<Entry> entries, uint64_t buffer_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::string where = "safetensors file '" + path + "': ";
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    LOOM_CHECK(e.end <= buffer_size)
        << where << "tensor '" << e.name << "' has data_offsets [" << e.begin << ", " << e.end
        << "] outside the " << buffer_size << "-byte data buffer";
    LOOM_CHECK(e.begin >= covered) << where << "tensor '" << e.name << "' [" << e.begin << ", "
                                   << e.end << ") overlaps tensor '" << previous->name << "' ["
                                   << previous->begin << ", " << previous->end << ")";
    LOOM_CHECK(e.begin == covered) << where << "bytes [" << covered << ", " << e.begin
                                   << ") of the data buffer belong to no tensor";
    covered = e.end;
    previous = &e;
  }
  LOOM_CHECK(covered == buffer_size)
      << where << (buffer_size - covered) << " trailing bytes after the last tensor (data "
      << "buffer is " << buffer_size << " bytes, tensors cover " << covered << ")";
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::F8E4M3:
      return "F8_E4M3";
    case DType::F8E5M2:
      return "F8_E5M2";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
  }
  LOOM_FAIL() << "safetensors: no name for dtype " << int(dtype);
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Everything is validated before the temp file exists.
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta.set(key, value);
    header.set("__metadata__", std::move(meta));
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(!name.empty()) << "save_safetensors '" << path << "': empty tensor name";
    LOOM_CHECK(name != "__metadata__")
        << "save_safetensors '" << path << "': '__metadata__' is reserved, not a tensor name";
    LOOM_CHECK(seen.insert(name).second)
        << "save_safetensors '" << path << "': tensor name '" << name << "' appears twice";
    LOOM_CHECK(t.defined()) << "save_safetensors '" << path << "': tensor '" << name
                            << "' is undefined";
    Json shape = Json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    const uint64_t nbytes = t.nbytes();
    header.set(
        name,
        Json::object({{"dtype", safetensors_dtype_name(t.dtype())},
                      {"shape", std::move(shape)},
                      {"data_offsets", Json::array({int64_t(offset), int64_t(offset + nbytes)})}}));
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // buffer starts 8-byte aligned

  AtomicFile file(path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  file.write(length, 8);
  file.write(text);
  for (const auto& [name, t] : tensors) {
    const Tensor host = host_contiguous(t);
    file.write(host.data_ptr(), host.nbytes());
  }
  file.commit();
}

SafetensorsFile load_safetensors(const std::string& path) {
  InputFile in(path);
  const std::string where = "safetensors file '" + path + "'";
  LOOM_CHECK(in.size() >= 8) << where << " is " << in.size()
                             << " bytes, too short for the 8-byte header length";
  uint8_t length_bytes[8];
  in.read_at(0, length_bytes, 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(length_bytes[i]) << (8 * i);
  LOOM_CHECK(header_len <= in.size() - 8)
      << where << ": header length " << header_len << " is larger than the " << (in.size() - 8)
      << " bytes that follow it";
  LOOM_CHECK(header_len <= kMaxHeaderBytes) << where << ": header length " << header_len
                                            << " exceeds the " << kMaxHeaderBytes << "-byte limit";

  std::string text(header_len, '\0');
  in.read_at(8, text.data(), header_len);
  const Json header = Json::parse(text, where + " header");
  LOOM_CHECK(header.is_object()) << where << ": header is " << Json::type_name(header.type())
                                 << ", expected a JSON object";

  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  for (const auto& [name, spec] : header.items()) {
    if (name == "__metadata__") {
      LOOM_CHECK(spec.is_object()) << where << ": __metadata__ is " << Json::type_name(spec.type())
                                   << ", expected an object";
      for (const auto& [key, value] : spec.items()) {
        LOOM_CHECK(value.is_string()) << where << ": __metadata__ key '" << key << "' is "
                                      << Json::type_name(value.type()) << ", expected a string";
        out.metadata[key] = value.as_string();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, spec));
  }
  const uint64_t buffer_start = 8 + header_len;
  check_layout(path, entries, in.size() - buffer_start);

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, cpu_device());
    in.read_at(buffer_start + e.begin, t.data_ptr(), e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return true;
  }
  return false;
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  std::string have;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) {
    have += (i ? ", '" : "'") + tensors[i].first + "'";
  }
  if (tensors.size() > 8) have += ", ...";
  LOOM_FAIL() << "safetensors file '" << path << "' has no tensor '" << name << "' (it has "
              << tensors.size() << (tensors.empty() ? " tensors)" : " tensors: " + have + ")");
}

std::map<std::string, Tensor> SafetensorsFile::by_name() const {
  return std::map<std::string, Tensor>(tensors.begin(), tensors.end());
}

}  // namespace loom
