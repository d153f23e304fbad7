#include "loom/data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/core/error.h"

namespace loom {
namespace {
constexpr int64_t kHeaderInts = 256, kHeaderBytes = kHeaderInts * 4;
constexpr int32_t kMagic16 = 20240520, kVersion16 = 1, kMagic32 = 20240801, kVersion32 = 7;

void pread_all(int fd, void* out, size_t n, int64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    LOOM_CHECK(got > 0) << "token file " << path << ": read at byte " << offset << " failed: "
                        << (got < 0 ? std::strerror(errno) : "unexpected end of file");
    p += got;
    offset += got;
    n -= size_t(got);
  }
}
}  // namespace

TokenFile::TokenFile(const std::string& path, int64_t vocab_size) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd_ >= 0) << "token file " << path << ": cannot open: " << std::strerror(errno);
  struct stat st {};
  ::fstat(fd_, &st);
  const int64_t file_bytes = int64_t(st.st_size);
  LOOM_CHECK(file_bytes >= kHeaderBytes)
      << "token file " << path << ": " << file_bytes << " bytes, shorter than its " << kHeaderBytes
      << "-byte header (not a token file, or truncated)";
  int32_t header[kHeaderInts];
  pread_all(fd_, header, sizeof header, 0, path);
  if (header[0] == kMagic16 && header[1] == kVersion16) {
    width_ = 2;
  } else if (header[0] == kMagic32 && header[1] == kVersion32) {
    width_ = 4;
  } else {
    LOOM_FAIL() << "token file " << path << ": header starts " << header[0] << " " << header[1]
                << ", expected " << kMagic16 << " " << kVersion16 << " (uint16 tokens) or "
                << kMagic32 << " " << kVersion32 << " (uint32 tokens)";
  }
  count_ = header[2];
  LOOM_CHECK(count_ >= 0) << "token file " << path << ": negative token count " << count_;
  LOOM_CHECK(file_bytes == kHeaderBytes + count_ * width_)
      << "token file " << path << ": the header promises " << count_ << " tokens ("
      << kHeaderBytes + count_ * width_ << " bytes) but the file has " << file_bytes
      << " bytes (truncated or corrupt)";
  if (vocab_size <= 0) return;
  std::vector<int32_t> chunk(size_t(1) << 18);
  for (int64_t at = 0; at < count_; at += int64_t(chunk.size())) {
    const int64_t n = std::min<int64_t>(int64_t(chunk.size()), count_ - at);
    read(at, n, chunk.data());
    for (int64_t i = 0; i < n; ++i)
      LOOM_CHECK(chunk[size_t(i)] < vocab_size)
          << "token file " << path << ": token " << at + i << " is " << chunk[size_t(i)]
          << ", outside the vocabulary of " << vocab_size << " (a file of another tokenizer?)";
  }
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::read(int64_t start, int64_t n, int32_t* out) const {
  LOOM_CHECK(start >= 0 && n >= 0 && start + n <= count_)
      << "token file " << path_ << ": tokens [" << start << ", " << start + n
      << ") are outside its " << count_;
  const int64_t offset = kHeaderBytes + start * width_;
  if (width_ == 4) {
    pread_all(fd_, out, size_t(n) * 4, offset, path_);
    return;
  }
  // uint16 tokens, widened in place from the back so the buffer serves both.
  auto* narrow = reinterpret_cast<uint16_t*>(out);
  pread_all(fd_, narrow, size_t(n) * 2, offset, path_);
  for (int64_t i = n - 1; i >= 0; --i) out[i] = int32_t(narrow[i]);
}

TokenFileWriter::TokenFileWriter(const std::string& path, int64_t vocab_size)
    : file_(path), width_(vocab_size <= 65536 ? 2 : 4), vocab_size_(vocab_size) {
  const int32_t header[kHeaderInts] = {};
  file_.write(header, sizeof header);
}

void TokenFileWriter::append(const std::vector<int32_t>& tokens) {
  // llm.c's header holds the count as an int32.
  LOOM_CHECK(count_ + int64_t(tokens.size()) < (int64_t(1) << 31))
      << "token file " << file_.path() << ": more than 2^31 - 1 tokens; write several files";
  std::vector<char> bytes(tokens.size() * size_t(width_));
  for (size_t i = 0; i < tokens.size(); ++i) {
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size_)
        << "token file " << file_.path() << ": token " << tokens[i] << " outside [0, "
        << vocab_size_ << ")";
    if (width_ == 2) {
      const auto v = uint16_t(tokens[i]);
      std::memcpy(&bytes[i * 2], &v, 2);
    } else {
      std::memcpy(&bytes[i * 4], &tokens[i], 4);
    }
  }
  file_.write(bytes.data(), bytes.size());
  count_ += int64_t(tokens.size());
}

void TokenFileWriter::commit() {
  const int32_t head[3] = {width_ == 2 ? kMagic16 : kMagic32, width_ == 2 ? kVersion16 : kVersion32,
                           int32_t(count_)};
  file_.overwrite(0, head, sizeof head);
  file_.commit();
}

}  // namespace loom
