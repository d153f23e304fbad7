#include "loom/data/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "loom/core/error.h"

namespace loom {

std::string known_piece_pattern(const std::string& name) {
  // The patterns as tiktoken 0.14 spells them (tiktoken_ext/openai_public.py).
  if (name == "gpt2")
    return R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)";
  if (name == "cl100k")
    return R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
  if (name == "o200k")
    return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
           R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
           R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return "";
}

PieceRegex::PieceRegex(const std::string& pattern, const std::string& origin) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // UCP: \s, \d, \w and \p{..} by Unicode properties, as the Rust and Oniguruma regexes of
  // tiktoken and tokenizers read them; DOLLAR_ENDONLY: `$` is the end of the text only.
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &error,
                    &error_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    LOOM_FAIL() << origin << ": the pre-tokenisation regex does not compile at offset "
                << error_offset << ": " << reinterpret_cast<const char*>(message)
                << " (pattern: " << pattern << ")";
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, the interpreter runs
  code_ = code;
}

PieceRegex::~PieceRegex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void PieceRegex::for_each_piece(const std::string& text,
                                const std::function<void(size_t, size_t)>& fn) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;    // where the next search starts
  size_t done = 0;  // text before this is in pieces already
  uint32_t options = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), at, options, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    LOOM_CHECK(rc > 0) << "pre-tokenisation regex failed with PCRE2 error " << rc;
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
    if (span[1] == span[0]) {  // an empty match cuts nothing: look for a non-empty one
      options = PCRE2_NOTEMPTY_ATSTART;
      at = span[0];
      continue;
    }
    options = 0;
    if (span[0] > done) fn(done, span[0] - done);
    fn(span[0], span[1] - span[0]);
    done = at = span[1];
  }
  if (done < text.size()) fn(done, text.size() - done);
}

}  // namespace loom
