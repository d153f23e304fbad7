// A language model's data: its tokenizer (bytes or a BPE), its training and held-out tokens --
// a text tokenized at start, or token files prepared once (`loom data prepare`), several of
// them mixed by weight -- and windows of T + 1 tokens cut from them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/bpe.h"
#include "loom/data/token_file.h"

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

// spec: "bytes"; "bpe" (a BPE the run learned: its copy in run_dir, at most vocab_size tokens);
// a Loom BPE file (`loom tokenizer train`); a Hugging Face tokenizer.json; a
// tiktoken rank file (*.tiktoken), cut by the named `pattern` (tokenizer_files.h); or a
// directory holding one of those as tokenizer.{json,tiktoken,bpe}, or GPT-2's vocab.json +
// merges.txt (a Hugging Face model, a run directory, a `loom data prepare` directory). It must have
// vocab_size tokens. A copy in `run_dir` (save_tokenizer_copy) is read instead when there. Errors
// name data.tokenizer and model.vocab_size.
Tokenizer load_tokenizer(const std::string& spec, const std::string& pattern, int64_t vocab_size,
                         const std::string& run_dir = "");
// The same without a vocabulary size to match.
Tokenizer read_tokenizer(const std::string& spec, const std::string& pattern,
                         const std::string& run_dir = "");
// Copies the files a tokenizer was read from into run_dir, under the names load_tokenizer
// looks for there (tokenizer.bpe, tokenizer.json, vocab.json + merges.txt, tokenizer.tiktoken).
void save_tokenizer_copy(const Tokenizer& tok, const std::string& run_dir);

// Token streams to cut windows from, each held in memory or read in place from a token file,
// each drawn with its weight.
class TokenSet {
 public:
  void add(std::vector<int32_t> tokens, double weight = 1);
  void add(std::shared_ptr<const TokenFile> file, double weight = 1);
  int streams() const { return int(streams_.size()); }
  int64_t size(int stream) const;
  int64_t total() const;
  void read(int stream, int64_t start, int64_t n, int32_t* out) const;
  double weight(int stream) const { return streams_[size_t(stream)].weight; }

 private:
  struct Stream {
    std::vector<int32_t> tokens;
    std::shared_ptr<const TokenFile> file;
    double weight = 1;
  };
  std::vector<Stream> streams_;
};

struct TokenizedText {
  std::string source;  // the text file or the prepared directories
  TokenSet train, val;
};

// The text at `source` split by split_text(val_fraction), each part tokenized on its own;
// each must have at least min_tokens tokens.
TokenizedText tokenize_text(const std::string& source, const Tokenizer& tok, double val_fraction,
                            int64_t min_tokens);
// Directories of `loom data prepare` (train.bin, val.bin), mixed for training by `weights`
// (one each, positive); their tokens must be below vocab_size and each file must have at least
// min_tokens. Each must have been prepared with the run's tokenizer `tok` (the copy in it,
// read with `pattern` where a .tiktoken needs one): ids of another tokenizer are other text.
TokenizedText open_token_dirs(const std::vector<std::string>& dirs,
                              const std::vector<double>& weights, int64_t vocab_size,
                              int64_t min_tokens, const Tokenizer& tok, const std::string& pattern);

struct Window {
  int stream = 0;
  int64_t start = 0;
};
// Window g of T + 1 tokens: its stream drawn by weight, its start uniform over [0, n - T) of
// that stream's n tokens, both from Philox at counter g under `key` (a single stream is never
// drawn, so its windows do not depend on the weights).
Window draw_window(const TokenSet& set, uint64_t key, int64_t g, int64_t T);
// Windows of T + 1 tokens: ids (B, T) are the first T, targets (B, T) the last T.
std::pair<Tensor, Tensor> gather_windows(const TokenSet& set, const std::vector<Window>& windows,
                                         int64_t T);
// Evaluation windows: in each stream, `count` / streams of its non-overlapping tiles i * T,
// spread evenly (count = 0 or more than there are: all of them).
std::vector<Window> eval_windows(const TokenSet& set, int64_t T, int64_t count);

}  // namespace loom
