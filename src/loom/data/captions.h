// Captions (data/canvas.h) as the MMDiT text encoder's token ids, padded to a fixed length: id 0
// pads, id 1 is every position of the null (unconditional) caption, the caption's tokens follow.
//  - CaptionVocab: the words of a closed vocabulary read off the caption grammar, so a prompt
//    outside it fails by name instead of becoming a token the model never saw. Captions are
//    split at spaces, a comma is a word of its own, and a class name of two words ("ankle boot")
//    is two tokens.
//  - CaptionTokenizer: that vocabulary or a byte-level BPE (bpe.h), whose token k is id k + 2.
//    A BPE encodes any text, but a token the training captions never hold was never learned:
//    once told the training captions, it refuses a caption holding another, naming it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/bpe.h"

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
  // The longest caption the canvas grammar writes, in tokens (four items, two-word classes).
  static int64_t longest_canvas_caption();

 private:
  std::vector<std::string> words_;
};

class CaptionTokenizer {
 public:
  CaptionTokenizer() = default;                 // CaptionVocab's words
  explicit CaptionTokenizer(BpeTokenizer bpe);  // a BPE's tokens
  static constexpr int64_t kFirstToken = 2;     // ids 0 and 1: CaptionVocab::kPad, kNull
  bool words() const { return !bpe_; }
  const BpeTokenizer& bpe() const;
  int64_t size() const;  // ids: kFirstToken + the tokens
  // The tokens of `captions` are the known ones from now on (a BPE only).
  void learn_known(const std::vector<std::string>& captions);
  std::vector<int64_t> encode(const std::string& caption, int64_t length) const;
  Tensor encode_all(const std::vector<std::string>& captions, int64_t length) const;  // (N, L)

 private:
  CaptionVocab vocab_;
  std::shared_ptr<const BpeTokenizer> bpe_;
  std::vector<bool> known_;  // by BPE token; empty: all
};

}  // namespace loom
