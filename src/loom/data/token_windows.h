// A language model's data: its tokenizer (bytes or a saved BPE), a text tokenized into a
// training head and a held-out tail, and windows of T + 1 tokens cut from them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/bpe.h"

namespace loom {

// The plain byte tokenizer ("bytes") or a BPE: Loom's own or another tool's.
struct Tokenizer {
  bool bytes = true;
  BpeTokenizer bpe;                // the 256 byte tokens when bytes
  std::vector<std::string> files;  // where it was read from (a run directory keeps copies)

  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const { return bpe.decode(ids); }
  int64_t bytes_of(int32_t id) const { return bytes ? 1 : int64_t(bpe.token_bytes(id).size()); }
};

// spec: "bytes"; a Loom BPE file (`loom tokenizer train`); a Hugging Face tokenizer.json, or a
// directory holding one or GPT-2's vocab.json + merges.txt; or a tiktoken rank file
// (*.tiktoken), cut by the named `pattern` (tokenizer_files.h). It must have vocab_size
// tokens. A copy in `run_dir` (save_tokenizer_copy) is read instead when there. Errors name
// data.tokenizer and model.vocab_size.
Tokenizer load_tokenizer(const std::string& spec, const std::string& pattern, int64_t vocab_size,
                         const std::string& run_dir = "");
// The same without a vocabulary size to match.
Tokenizer read_tokenizer(const std::string& spec, const std::string& pattern,
                         const std::string& run_dir = "");
// Copies the files a tokenizer was read from into run_dir, under the names load_tokenizer
// looks for there (tokenizer.bpe, tokenizer.json, vocab.json + merges.txt, tokenizer.tiktoken).
void save_tokenizer_copy(const Tokenizer& tok, const std::string& run_dir);

struct TokenizedText {
  std::string source;  // the text file
  std::vector<int32_t> train, val;
};

// The text at `source` split by split_text(val_fraction), each part tokenized on its own;
// each must have at least min_tokens tokens.
TokenizedText tokenize_text(const std::string& source, const Tokenizer& tok, double val_fraction,
                            int64_t min_tokens);

// Start of window g among windows of T + 1 tokens of n tokens: uniform over [0, n - T), from
// Philox at counter g under `key`.
int64_t window_start(uint64_t key, int64_t g, int64_t n, int64_t T);
// Windows of T + 1 tokens at `starts`: ids (B, T) are the first T, targets (B, T) the last T.
std::pair<Tensor, Tensor> gather_windows(const std::vector<int32_t>& tokens,
                                         const std::vector<int64_t>& starts, int64_t T);
// Starts of evaluation windows: `count` of the non-overlapping tiles i * T of n tokens, spread
// evenly (count = 0 or more than there are: all of them).
std::vector<int64_t> eval_window_starts(int64_t n, int64_t T, int64_t count);

}  // namespace loom
