// Writing a file so that a reader (or a restart after a crash) sees either the old file or the
// complete new one, never a prefix. Data goes to a temp file in the same directory (rename is
// only atomic within one file system); commit() fsyncs it, renames it over the target and
// fsyncs the directory so the rename itself is durable. An AtomicFile destroyed without
// commit() (an exception part-way) removes its temp file and leaves the target untouched.
#pragma once
#include <cstddef>
#include <string>

namespace loom {

class AtomicFile {
 public:
  // Creates "<path>.tmp.<pid>.<n>"; throws naming the path when the directory is missing or
  // not writable.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  // Rewrites bytes already written at `offset` (a header whose counts are known only at the
  // end); the next write() still appends.
  void overwrite(size_t offset, const void* data, size_t nbytes);
  // Makes the new contents visible under path(). Nothing may be written afterwards.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole file in one call (manifests, trainer state).
void write_file_atomic(const std::string& path, const std::string& contents);
// Makes renames and new entries in a directory durable.
void sync_directory(const std::string& dir);

}  // namespace loom
