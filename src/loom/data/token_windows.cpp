#include "loom/data/token_windows.h"

#include <filesystem>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/text.h"
#include "loom/data/tokenizer_files.h"
#include "loom/ops/creation.h"

namespace loom {

namespace fs = std::filesystem;

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  if (!bytes) return bpe.encode(text);
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = int32_t(uint8_t(text[i]));
  return ids;
}

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// The name a tokenizer file has in a run directory.
std::string copy_name(const std::string& file) {
  const std::string name = fs::path(file).filename().string();
  if (name == "vocab.json" || name == "merges.txt") return name;
  if (ends_with(name, ".json")) return "tokenizer.json";
  return ends_with(name, ".tiktoken") ? "tokenizer.tiktoken" : "tokenizer.bpe";
}
// The files of the tokenizer `spec` names, or those of its copy in run_dir when present.
std::vector<std::string> tokenizer_files(const std::string& spec, const std::string& run_dir) {
  std::vector<std::string> files;
  if (fs::is_directory(spec)) {
    if (fs::is_regular_file(fs::path(spec) / "tokenizer.json"))
      files = {(fs::path(spec) / "tokenizer.json").string()};
    else
      files = {(fs::path(spec) / "vocab.json").string(), (fs::path(spec) / "merges.txt").string()};
  } else {
    files = {spec};
  }
  std::vector<std::string> copies;
  for (const std::string& f : files) copies.push_back((fs::path(run_dir) / copy_name(f)).string());
  bool have_copies = !run_dir.empty();
  for (const std::string& c : copies) have_copies = have_copies && fs::is_regular_file(c);
  if (have_copies) return copies;
  for (const std::string& f : files)
    LOOM_CHECK(fs::is_regular_file(f))
        << "data.tokenizer " << spec << ": " << f << " does not exist (expected \"bytes\", a BPE "
        << "file made by `loom tokenizer train`, a tokenizer.json, a directory with tokenizer.json "
        << "or vocab.json + merges.txt, or a .tiktoken file)";
  return files;
}
}  // namespace

Tokenizer read_tokenizer(const std::string& spec, const std::string& pattern,
                         const std::string& run_dir) {
  Tokenizer t;
  if (spec == "bytes") return t;
  t.bytes = false;
  t.files = tokenizer_files(spec, run_dir);
  const std::string& first = t.files[0];
  if (t.files.size() == 2)
    t.bpe = read_vocab_merges(t.files[0], t.files[1]);
  else if (ends_with(first, ".json"))
    t.bpe = read_tokenizer_json(first);
  else if (ends_with(first, ".tiktoken"))
    t.bpe = read_tiktoken(first, pattern);
  else
    t.bpe = BpeTokenizer::load(first);
  return t;
}

Tokenizer load_tokenizer(const std::string& spec, const std::string& pattern, int64_t vocab_size,
                         const std::string& run_dir) {
  Tokenizer t = read_tokenizer(spec, pattern, run_dir);
  LOOM_CHECK(t.bpe.vocab_size() == vocab_size)
      << "data.tokenizer " << (t.bytes ? "\"bytes\"" : spec) << " has " << t.bpe.vocab_size()
      << " tokens but model.vocab_size is " << vocab_size;
  return t;
}

void save_tokenizer_copy(const Tokenizer& tok, const std::string& run_dir) {
  for (const std::string& f : tok.files) {
    const fs::path to = fs::path(run_dir) / copy_name(f);
    if (fs::absolute(f) != fs::absolute(to)) write_file_atomic(to.string(), read_text_file(f));
  }
}

TokenizedText tokenize_text(const std::string& source, const Tokenizer& tok, double val_fraction,
                            int64_t min_tokens) {
  TokenizedText d;
  d.source = source;
  const std::string text = read_text_file(source);
  const TextSplit split = split_text(text, val_fraction);
  d.train = tok.encode(std::string(split.train.begin(), split.train.end()));
  d.val = tok.encode(std::string(split.val.begin(), split.val.end()));
  LOOM_CHECK(int64_t(d.train.size()) >= min_tokens && int64_t(d.val.size()) >= min_tokens)
      << "text " << source << " (" << text.size() << " bytes) is too short: its training and "
      << "held-out parts have " << d.train.size() << " and " << d.val.size()
      << " tokens, each needs at least model.context + 2 = " << min_tokens;
  return d;
}

int64_t window_start(uint64_t key, int64_t g, int64_t n, int64_t T) {
  const auto r = philox4x32_10(uint64_t(g), 0, key);
  const uint64_t v = uint64_t(r[0]) << 32 | r[1];
  return int64_t(v % uint64_t(n - T));
}

std::pair<Tensor, Tensor> gather_windows(const std::vector<int32_t>& tokens,
                                         const std::vector<int64_t>& starts, int64_t T) {
  const int64_t B = int64_t(starts.size());
  std::vector<int64_t> ids(size_t(B * T)), targets(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      ids[size_t(b * T + t)] = tokens[size_t(starts[size_t(b)] + t)];
      targets[size_t(b * T + t)] = tokens[size_t(starts[size_t(b)] + t + 1)];
    }
  return {from_vector(ids, {B, T}), from_vector(targets, {B, T})};
}

std::vector<int64_t> eval_window_starts(int64_t n, int64_t T, int64_t count) {
  const int64_t tiles = (n - 1) / T;
  std::vector<int64_t> starts;
  if (count <= 0 || count >= tiles) {
    for (int64_t i = 0; i < tiles; ++i) starts.push_back(i * T);
  } else if (count == 1) {
    starts.push_back(0);
  } else {
    for (int64_t i = 0; i < count; ++i) starts.push_back(i * (tiles - 1) / (count - 1) * T);
  }
  return starts;
}

}  // namespace loom
