#include "loom/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

std::string directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Unique within the process; the pid makes it unique across processes sharing a directory.
uint64_t next_temp_number() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  LOOM_CHECK(!path_.empty()) << "atomic write: empty file path";
  const std::string dir = directory_of(path_);
  LOOM_CHECK(std::filesystem::is_directory(dir))
      << "cannot write '" << path_ << "': directory '" << dir << "' does not exist";
  // O_EXCL: never reuse a stale temp file another writer might still hold.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ =
        path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(next_temp_number());
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  LOOM_CHECK(fd_ >= 0) << "cannot write '" << path_ << "': creating temp file '" << temp_path_
                       << "' failed: " << errno_text();
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t nbytes) {
  LOOM_CHECK(fd_ >= 0 && !committed_) << "atomic write of '" << path_ << "': file already closed";
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    // Large single writes are split: Linux transfers at most ~2 GiB per call anyway.
    const ssize_t n = ::write(fd_, p, std::min<size_t>(nbytes, size_t(1) << 30));
    if (n < 0 && errno == EINTR) continue;
    LOOM_CHECK(n > 0) << "writing '" << temp_path_ << "' (for '" << path_
                      << "') failed: " << (n < 0 ? errno_text() : "no progress");
    p += n;
    nbytes -= size_t(n);
  }
}

void AtomicFile::overwrite(size_t offset, const void* data, size_t nbytes) {
  LOOM_CHECK(fd_ >= 0 && !committed_) << "atomic write of '" << path_ << "': file already closed";
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, nbytes, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    LOOM_CHECK(n > 0) << "writing '" << temp_path_ << "' (for '" << path_
                      << "') failed: " << (n < 0 ? errno_text() : "no progress");
    p += n;
    offset += size_t(n);
    nbytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  LOOM_CHECK(fd_ >= 0 && !committed_) << "atomic write of '" << path_ << "': already committed";
  // Data must be on disk before the rename publishes it, or a crash can leave a named but
  // empty file.
  LOOM_CHECK(::fsync(fd_) == 0) << "fsync of '" << temp_path_ << "' failed: " << errno_text();
  const int rc = ::close(fd_);
  fd_ = -1;
  LOOM_CHECK(rc == 0) << "closing '" << temp_path_ << "' failed: " << errno_text();
  LOOM_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0)
      << "renaming '" << temp_path_ << "' to '" << path_ << "' failed: " << errno_text();
  committed_ = true;
  sync_directory(directory_of(path_));
}

void sync_directory(const std::string& dir) {
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  LOOM_CHECK(dir_fd >= 0) << "opening directory '" << dir
                          << "' to fsync it failed: " << errno_text();
  const int sync_rc = ::fsync(dir_fd);
  ::close(dir_fd);
  LOOM_CHECK(sync_rc == 0) << "fsync of directory '" << dir << "' failed: " << errno_text();
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

}  // namespace loom
