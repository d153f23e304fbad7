#include "loom/core/jsonl_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/core/error.h"

namespace loom {

namespace {

// Cuts the file back to just after its last newline (to nothing when it has none).
void drop_unfinished_line(int fd, const std::string& path) {
  struct stat st {};
  LOOM_CHECK(::fstat(fd, &st) == 0) << "cannot read " << path << ": " << std::strerror(errno);
  off_t end = st.st_size;
  char buf[4096];
  while (end > 0) {
    const off_t from = end > off_t(sizeof buf) ? end - off_t(sizeof buf) : 0;
    const ssize_t n = ::pread(fd, buf, size_t(end - from), from);
    LOOM_CHECK(n == end - from) << "cannot read " << path << ": " << std::strerror(errno);
    const void* nl = ::memrchr(buf, '\n', size_t(n));
    if (nl) {
      end = from + (static_cast<const char*>(nl) - buf) + 1;
      break;
    }
    end = from;
  }
  if (end != st.st_size) {
    LOOM_CHECK(::ftruncate(fd, end) == 0)
        << "cannot cut the unfinished last line of " << path << ": " << std::strerror(errno);
  }
}

void append_whole(int fd, const std::string& path, const std::string& record) {
  const std::string line = record + "\n";
  errno = 0;
  const ssize_t n = ::write(fd, line.data(), line.size());
  if (n == ssize_t(line.size())) return;
  const int err = errno ? errno : ENOSPC;  // a short write sets no errno: the disk is full
  if (n > 0) {
    // O_APPEND wrote the part at the end, so the offset now is where it ends.
    const off_t at = ::lseek(fd, 0, SEEK_CUR);
    LOOM_CHECK(at >= n && ::ftruncate(fd, at - n) == 0)
        << "cannot write " << path << " (" << std::strerror(err)
        << ") nor cut off the part of a record written: its last line is unfinished";
  }
  LOOM_FAIL() << "cannot write " << path << ": " << std::strerror(err);
}

}  // namespace

JsonlFile::JsonlFile(std::string path, bool append) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | (append ? 0 : O_TRUNC), 0644);
  LOOM_CHECK(fd_ >= 0) << "cannot open " << path_ << " for writing: " << std::strerror(errno);
  if (append) drop_unfinished_line(fd_, path_);
}

JsonlFile::~JsonlFile() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlFile::append(const std::string& record) {
  append_whole(fd_, path_, record);
}

void append_jsonl_record(const std::string& path, const std::string& record) {
  // Not cut on opening: another process may be writing its line this very moment.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  LOOM_CHECK(fd >= 0) << "cannot open " << path << " for appending: " << std::strerror(errno);
  try {
    append_whole(fd, path, record);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace loom
