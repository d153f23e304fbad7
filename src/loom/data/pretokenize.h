// Pre-tokenisation by regex (PCRE2, UTF-8 with Unicode properties): the pieces of a text are
// the regex's successive matches and the stretches between them, as Hugging Face's Split
// ("isolated") and ByteLevel pre-tokenizers cut them. Patterns of the common tokenizers are
// known by name.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace loom {

// GPT-2's (tiktoken r50k_base and p50k_base), GPT-4's (cl100k_base) and GPT-4o's (o200k_base)
// pre-tokenisation patterns by name ("gpt2", "cl100k", "o200k"), or "" for another name.
std::string known_piece_pattern(const std::string& name);

class PieceRegex {
 public:
  // Throws naming `origin`, the offset and PCRE2's message when the pattern does not compile.
  PieceRegex(const std::string& pattern, const std::string& origin);
  ~PieceRegex();
  PieceRegex(const PieceRegex&) = delete;
  PieceRegex& operator=(const PieceRegex&) = delete;

  // Calls fn(offset, length) for each piece of text, in order; they cover the text exactly.
  // Invalid UTF-8 never matches, so it ends up in the stretches between matches.
  void for_each_piece(const std::string& text, const std::function<void(size_t, size_t)>& fn) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8 (pcre2.h stays out of this header)
};

}  // namespace loom
