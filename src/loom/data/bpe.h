// Byte-level BPE tokenizer. Token ids 0..255 are the raw bytes; id 256 + k is made by merge k
// (a pair of earlier ids). Any byte string encodes, and decode(encode(s)) == s.
//
// Text is first cut into pieces and merges never cross a piece boundary (this keeps training
// fast and tokens word-like). A piece is a run of whitespace bytes (space, \t, \n, \v, \f, \r)
// followed by a run of other bytes, so " the" and "\n\nAnd" are pieces; a piece longer than
// kMaxPieceBytes is cut every kMaxPieceBytes bytes. GPT-2's regex split (letters / digits /
// punctuation apart) is not used: punctuation stays attached to its word.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom {

class BpeTokenizer {
 public:
  static constexpr int kByteTokens = 256;
  static constexpr size_t kMaxPieceBytes = 256;

  // The plain byte tokenizer: 256 tokens, no merges.
  BpeTokenizer();

  // Learns up to vocab_size - 256 merges from `text`, each time merging the most frequent
  // adjacent pair (ties: the smaller (left id, right id) wins, so training is deterministic).
  // Stops early when no pair occurs at least twice, so vocab_size() may come out smaller.
  static BpeTokenizer train(const std::string& text, int vocab_size);

  // Applies the merges in the order they were learned (lowest rank first), piece by piece.
  std::vector<int32_t> encode(const std::string& text) const;
  // Concatenates the bytes of each token; throws on an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const { return int(tokens_.size()); }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  const std::string& token_bytes(int32_t id) const;

  // Text file "loom-bpe 1", "merges N", then N lines "left right" (line k defines id 256 + k),
  // written atomically. load() checks every line and names the file and line on errors.
  void save(const std::string& path) const;
  static BpeTokenizer load(const std::string& path);

 private:
  // Builds the token table and ranks; `origin` names where the merges came from for errors.
  BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges, const std::string& origin);
  std::vector<int32_t> encode_piece(const uint8_t* bytes, size_t n) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::string> tokens_;             // id -> the bytes it stands for
  std::unordered_map<uint64_t, int32_t> rank_;  // bpe_pair_key(left, right) -> merge index
};

namespace detail {
// Key of the adjacent pair (left, right), used for ranking and counting.
inline uint64_t bpe_pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}
// Calls fn(offset, length) for each piece of `text` (see the comment at the top).
template <typename Fn>
void for_each_bpe_piece(const std::string& text, Fn&& fn) {
  auto is_space = [](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  const size_t n = text.size();
  size_t start = 0;
  while (start < n) {
    size_t i = start;
    while (i < n && is_space(text[i])) ++i;
    while (i < n && !is_space(text[i])) ++i;
    for (size_t s = start; s < i; s += BpeTokenizer::kMaxPieceBytes)
      fn(s, std::min(BpeTokenizer::kMaxPieceBytes, i - s));
    start = i;
  }
}
}  // namespace detail

}  // namespace loom
