// Byte-level BPE tokenizers: Loom's own (learned here) and those made by other tools -- Hugging
// Face tokenizer.json, GPT-2's vocab.json + merges.txt, tiktoken rank files (tokenizer_files.h
// reads and writes those) -- in one class, encoding token for token as those tools do.
//
// A text is cut into pieces (pre-tokenisation) and merges never cross a piece boundary. A piece
// starts as the tokens of its bytes; then, while some adjacent pair is mergeable, the pair of
// lowest priority is merged (the leftmost of equals), one pair at a time.
//  - Loom's own: ids 0..255 are the raw bytes, id 256 + k is made by merge k, priority k.
//    Pieces: a run of whitespace bytes (space, \t, \n, \v, \f, \r) followed by a run of other
//    bytes, so " the" and "\n\nAnd" are pieces; a piece longer than kMaxPieceBytes is cut every
//    kMaxPieceBytes bytes. Punctuation stays attached to its word.
//  - Hugging Face: ids from the vocabulary, priority = position in the merges list.
//  - tiktoken: id = rank; a pair is mergeable when its bytes together are a token, with that
//    token's rank as priority; a piece that is a token is that token at once.
//  - Both: pieces are the matches of a regex (PCRE2, e.g. GPT-2's), and the text between two
//    matches is a piece too.
//  - SentencePiece-style BPE (Llama 2, Mistral; Hugging Face tokenizer.json with byte_fallback):
//    tokens are text, "\u2581" standing for a space; the text gets a space before it (the
//    prefix space, see Parts::prefix), and is one piece (or, Metaspace with split, a piece before
//    each space). A piece starts as the tokens of its characters, a character the vocabulary lacks
//    as its bytes' tokens <0xNN> (byte fallback); merges as Hugging Face's, lowest priority first,
//    the leftmost of equals. Decoding drops the prefix space again.
// Special tokens (<|endoftext|>) have ids but are never produced from text: encode() reads
// their spelling as ordinary text, as tiktoken's encode_ordinary does.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom {

class PieceRegex;  // pretokenize.h

class BpeTokenizer {
 public:
  static constexpr int kByteTokens = 256;
  static constexpr size_t kMaxPieceBytes = 256;

  // What a tokenizer is made of, however it was stored.
  struct Parts {
    std::vector<std::string> tokens;  // id -> its bytes (a special token: its spelling)
    std::vector<bool> special;        // id -> never produced from text (empty: none)
    // (left id, right id) in priority order; empty: merge by rank, as tiktoken (see above).
    std::vector<std::pair<int32_t, int32_t>> merges;
    std::string pattern;             // pre-tokenisation regex; empty: Loom's pieces
    bool whole_piece_first = false;  // a piece that is a token is that token (HF ignore_merges)
    // SentencePiece-style (see above) when not empty: the id of <0xNN> for each byte NN, whose
    // entry in `tokens` is that byte. Every other token's entry is its text, each "\u2581"
    // turned back into the space it stands for.
    std::vector<int32_t> byte_tokens;
    // SentencePiece: a space before the text -- always (Llama 2's Prepend normalizer), unless it
    // starts with one (the Metaspace pre-tokenizer), or never.
    enum class Prefix { Always, UnlessSpaced, None } prefix = Prefix::Always;
    bool split_at_spaces = false;  // SentencePiece: a piece before each space (Metaspace split)
    bool sentencepiece() const { return !byte_tokens.empty(); }
  };

  // The plain byte tokenizer: 256 tokens, no merges.
  BpeTokenizer();

  // Learns up to vocab_size - 256 merges from `text`, each time merging the most frequent
  // adjacent pair (ties: the smaller (left id, right id) wins, so training is deterministic).
  // Stops early when no pair occurs at least twice, so vocab_size() may come out smaller.
  static BpeTokenizer train(const std::string& text, int vocab_size);

  // Checks the parts (every byte has a token, merges make tokens of the vocabulary, ids are
  // unique, the regex compiles); `origin` names the source in every error.
  static BpeTokenizer from_parts(Parts parts, const std::string& origin);

  std::vector<int32_t> encode(const std::string& text) const;
  // Concatenates the bytes of each token; throws on an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const { return int(parts_.tokens.size()); }
  const std::string& token_bytes(int32_t id) const;
  // The id of the special token spelled `text` (e.g. "<|endoftext|>"), or -1.
  int32_t special_id(const std::string& text) const;
  const Parts& parts() const { return parts_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return parts_.merges; }
  // The merges in priority order; for a tokenizer by rank, the merge that rebuilds each token
  // from tokens of lower rank (as Hugging Face's converters of tiktoken files do).
  std::vector<std::pair<int32_t, int32_t>> merge_list() const;
  // Learned here (ids 256 + k from merge k, Loom's pieces): what save() can write.
  bool is_loom_bpe() const;

  // Text file "loom-bpe 1", "merges N", then N lines "left right" (line k defines id 256 + k),
  // written atomically; only for is_loom_bpe(). load() checks every line and names the file
  // and line on errors.
  void save(const std::string& path) const;
  static BpeTokenizer load(const std::string& path);

 private:
  // Loom's own BPE from its merges (ids 256 + k), as train() and load() make it.
  BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges, const std::string& origin);
  struct Bare {};
  explicit BpeTokenizer(Bare) {}
  struct Merge {
    int32_t priority;
    int32_t merged;
  };
  // Only merges of priority below `limit` apply.
  std::vector<int32_t> encode_piece(const uint8_t* bytes, size_t n,
                                    int32_t limit = INT32_MAX) const;
  // SentencePiece-style: the text's pieces, each from its characters (or their bytes).
  std::vector<int32_t> encode_sentencepiece(const std::string& text) const;
  // Applies the merges to `ids` in place, lowest priority first and the leftmost of equals, in
  // O(n log n) (a heap of candidate pairs): a SentencePiece piece may be a whole text.
  void merge_all(std::vector<int32_t>& ids) const;

  Parts parts_;
  int32_t byte_token_[kByteTokens] = {};
  std::unordered_map<uint64_t, Merge> pair_;           // bpe_pair_key(left, right) -> its merge
  std::unordered_map<std::string, int32_t> by_bytes_;  // non-special token bytes -> id
  std::shared_ptr<const PieceRegex> regex_;            // null: Loom's pieces
};

namespace detail {
// Key of the adjacent pair (left, right), used for ranking and counting.
inline uint64_t bpe_pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}
// Calls fn(offset, length) for each of Loom's pieces of `text` (see the comment at the top).
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
