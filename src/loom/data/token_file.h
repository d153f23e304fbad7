// Token files in llm.c's layout (nanoGPT's .bin with a header): 256 little-endian int32 -- magic
// 20240520 and version 1 for uint16 tokens, magic 20240801 and version 7 for uint32 tokens,
// then the token count -- followed by the tokens. `loom data prepare` writes them; training
// reads windows from them in place, so a file of any size costs no memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/atomic_file.h"

namespace loom {

class TokenFile {
 public:
  // Checks the header, that the file holds exactly the tokens it promises (a truncated or
  // padded file is an error), and, when vocab_size > 0, that every token is below it -- one
  // pass in 1 MiB reads. Errors name the file and what is wrong.
  explicit TokenFile(const std::string& path, int64_t vocab_size = 0);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  int token_bytes() const { return width_; }  // 2 or 4
  const std::string& path() const { return path_; }
  // Tokens [start, start + n) into out. Reads with pread rather than a mapping: the pages a
  // long run touches would otherwise count towards its resident memory.
  void read(int64_t start, int64_t n, int32_t* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  int width_ = 2;
  int64_t count_ = 0;
};

// Writes a token file atomically: uint16 tokens when vocab_size <= 65536, else uint32.
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, int64_t vocab_size);
  void append(const std::vector<int32_t>& tokens);
  int64_t size() const { return count_; }
  void commit();  // writes the count into the header and makes the file visible

 private:
  AtomicFile file_;
  int width_;
  int64_t vocab_size_;
  int64_t count_ = 0;
};

}  // namespace loom
