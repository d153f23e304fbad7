#include "loom/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::train {

namespace {

constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

// TFRecord stores CRCs rotated and offset, so that a CRC of data holding CRCs stays strong.
uint32_t masked_crc(const std::string& bytes) {
  const uint32_t c = crc32c(bytes.data(), bytes.size());
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// Protocol buffer encoding, the few wire types an Event needs.
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(char(uint8_t(v) | 0x80));
  out.push_back(char(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}
template <typename T>
void put_fixed(std::string& out, int field, T value) {  // wire types 1 (64-bit) and 5 (32-bit)
  put_key(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian, as the wire format is
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {  // wire type 2
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Summary.Value {tag = 1, simple_value = 2} for every finite number below `prefix`.
void scalar_values(const Json& j, const std::string& prefix, std::string& summary) {
  for (const auto& [key, value] : j.items()) {
    const std::string tag = prefix.empty() ? key : prefix + "/" + key;
    if (value.is_object()) {
      scalar_values(value, tag, summary);
    } else if (value.is_number() && std::isfinite(value.as_double())) {
      std::string v;
      put_bytes(v, 1, tag);
      put_fixed(v, 2, float(value.as_double()));
      put_bytes(summary, 1, v);
    }
  }
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static constexpr std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(int64_t(wall_time())) + "." + host + "." +
          std::to_string(::getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  LOOM_CHECK(file_) << "cannot open " << path_ << " for writing: " << std::strerror(errno);
  std::string event;  // Event {wall_time = 1, file_version = 3}
  put_fixed(event, 1, wall_time());
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalars(const Json& metrics, int64_t step) {
  std::string summary;
  scalar_values(metrics, "", summary);
  write_summary(summary, step);
}

void TensorBoardWriter::write_summary(const std::string& summary, int64_t step) {
  std::string event;  // Event {wall_time = 1, step = 2, summary = 5}
  put_fixed(event, 1, wall_time());
  put_key(event, 2, 0);
  put_varint(event, uint64_t(step));
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::add_image(const std::string& tag, const std::string& png, int width,
                                  int height, int channels, int64_t step) {
  std::string image;  // Summary.Image {height = 1, width = 2, colorspace = 3, encoded = 4}
  put_key(image, 1, 0);
  put_varint(image, uint64_t(height));
  put_key(image, 2, 0);
  put_varint(image, uint64_t(width));
  put_key(image, 3, 0);
  put_varint(image, uint64_t(channels));  // 1 grayscale, 3 RGB
  put_bytes(image, 4, png);
  std::string value;  // Summary.Value {tag = 1, image = 4}
  put_bytes(value, 1, tag);
  put_bytes(value, 4, image);
  std::string summary;  // Summary {value = 1}
  put_bytes(summary, 1, value);
  write_summary(summary, step);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string length;
  put_le(length, data.size(), 8);
  std::string record = length;
  put_le(record, masked_crc(length), 4);
  record += data;
  put_le(record, masked_crc(data), 4);
  errno = 0;
  const bool written = std::fwrite(record.data(), 1, record.size(), file_) == record.size() &&
                       std::fflush(file_) == 0;
  LOOM_CHECK(written) << "cannot write " << path_ << ": " << std::strerror(errno);
}

}  // namespace loom::train
