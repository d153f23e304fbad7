// The words of the canvas captions (data/canvas.h) as token ids: a closed vocabulary read off
// the caption grammar, so a prompt outside it fails by name instead of becoming a token the
// model never saw. Captions are split at spaces, a comma is a word of its own, and a class
// name of two words ("ankle boot") is two tokens. Every caption is padded to a fixed length.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

class CaptionVocab {
 public:
  CaptionVocab();                      // the canvas grammar's words, in a fixed order
  static constexpr int64_t kPad = 0;   // fills a caption to its length
  static constexpr int64_t kNull = 1;  // every position of the unconditional caption
  int64_t size() const { return int64_t(words_.size()); }
  const std::string& word(int64_t id) const { return words_.at(size_t(id)); }
  // The caption's ids padded to `length`. Fails naming an unknown word, or the caption's
  // token count when it exceeds `length`.
  std::vector<int64_t> encode(const std::string& caption, int64_t length) const;
  // Captions as (N, length) i64.
  Tensor encode_all(const std::vector<std::string>& captions, int64_t length) const;
  // The longest caption the canvas grammar writes, in tokens (four items, two-word classes).
  static int64_t longest_canvas_caption();

 private:
  std::vector<std::string> words_;
};

}  // namespace loom
