#include "loom/data/token_windows.h"

#include <filesystem>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/json_file.h"
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
    // A Hugging Face model directory, or one of Loom's (a run's, a `loom data prepare` one).
    const fs::path d(spec);
    if (fs::is_regular_file(d / "tokenizer.json"))
      files = {(d / "tokenizer.json").string()};
    else if (fs::is_regular_file(d / "tokenizer.tiktoken"))
      files = {(d / "tokenizer.tiktoken").string()};
    else if (fs::is_regular_file(d / "tokenizer.bpe"))
      files = {(d / "tokenizer.bpe").string()};
    else
      files = {(d / "vocab.json").string(), (d / "merges.txt").string()};
  } else {
    files = {spec};
  }
  std::vector<std::string> copies;
  for (const std::string& f : files) copies.push_back((fs::path(run_dir) / copy_name(f)).string());
  bool have_copies = !run_dir.empty();
  for (const std::string& c : copies) have_copies = have_copies && fs::is_regular_file(c);
  if (have_copies) return copies;
  LOOM_CHECK(spec != "bpe") << "data.tokenizer \"bpe\" is learned by the run and kept in its "
                            << "directory, but " << (run_dir.empty() ? "no run directory" : run_dir)
                            << " has no tokenizer.bpe";
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
  // A BPE learned by the run stops early when no pair repeats: it may have fewer tokens.
  LOOM_CHECK(spec == "bpe" ? t.bpe.vocab_size() <= vocab_size : t.bpe.vocab_size() == vocab_size)
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

void TokenSet::add(std::vector<int32_t> tokens, double weight) {
  streams_.push_back({std::move(tokens), nullptr, weight});
}

void TokenSet::add(std::shared_ptr<const TokenFile> file, double weight) {
  streams_.push_back({{}, std::move(file), weight});
}

int64_t TokenSet::size(int stream) const {
  const Stream& s = streams_.at(size_t(stream));
  return s.file ? s.file->size() : int64_t(s.tokens.size());
}

int64_t TokenSet::total() const {
  int64_t n = 0;
  for (int s = 0; s < streams(); ++s) n += size(s);
  return n;
}

void TokenSet::read(int stream, int64_t start, int64_t n, int32_t* out) const {
  const Stream& s = streams_.at(size_t(stream));
  if (s.file) return s.file->read(start, n, out);
  LOOM_CHECK(start >= 0 && start + n <= int64_t(s.tokens.size()))
      << "tokens [" << start << ", " << start + n << ") outside " << s.tokens.size();
  std::copy(s.tokens.begin() + start, s.tokens.begin() + start + n, out);
}

TokenizedText tokenize_text(const std::string& source, const Tokenizer& tok, double val_fraction,
                            int64_t min_tokens) {
  TokenizedText d;
  d.source = source;
  const std::string text = read_text_file(source);
  const TextSplit split = split_text(text, val_fraction);
  std::vector<int32_t> train = tok.encode(std::string(split.train.begin(), split.train.end()));
  std::vector<int32_t> val = tok.encode(std::string(split.val.begin(), split.val.end()));
  LOOM_CHECK(int64_t(train.size()) >= min_tokens && int64_t(val.size()) >= min_tokens)
      << "text " << source << " (" << text.size() << " bytes) is too short: its training and "
      << "held-out parts have " << train.size() << " and " << val.size()
      << " tokens, each needs at least model.context + 2 = " << min_tokens;
  d.train.add(std::move(train));
  d.val.add(std::move(val));
  return d;
}

namespace {

bool same_tokenizer(const Tokenizer& a, const Tokenizer& b) {
  if (a.bytes || b.bytes) return a.bytes == b.bytes;
  const BpeTokenizer::Parts &x = a.bpe.parts(), &y = b.bpe.parts();
  return x.tokens == y.tokens && x.special == y.special && x.merges == y.merges &&
         x.pattern == y.pattern && x.whole_piece_first == y.whole_piece_first;
}

// The tokenizer a `loom data prepare` directory was made with: its meta.json names it and the
// directory holds a copy.
void check_prepared_with(const std::string& dir, const Tokenizer& tok, const std::string& pattern) {
  const fs::path meta_path = fs::path(dir) / "meta.json";
  LOOM_CHECK(fs::is_regular_file(meta_path))
      << "token data " << dir << " has no meta.json (not made by `loom data prepare`?)";
  const Json meta = read_json_file(meta_path.string());
  const std::string spec = meta.at("tokenizer").as_string();
  const Tokenizer prepared = spec == "bytes" ? Tokenizer{} : read_tokenizer(dir, pattern);
  LOOM_CHECK(same_tokenizer(prepared, tok))
      << "token data " << dir << " was prepared with the tokenizer " << spec << " ("
      << prepared.bpe.vocab_size() << " tokens), not with this run's data.tokenizer ("
      << (tok.bytes           ? std::string("bytes")
          : tok.files.empty() ? "?"
                              : tok.files.front())
      << ", " << tok.bpe.vocab_size() << " tokens): prepare it again with that tokenizer";
}

}  // namespace

TokenizedText open_token_dirs(const std::vector<std::string>& dirs,
                              const std::vector<double>& weights, int64_t vocab_size,
                              int64_t min_tokens, const Tokenizer& tok,
                              const std::string& pattern) {
  LOOM_CHECK(!dirs.empty() && weights.size() == dirs.size())
      << "token data: " << dirs.size() << " directories but " << weights.size() << " weights";
  TokenizedText d;
  for (size_t i = 0; i < dirs.size(); ++i) {
    LOOM_CHECK(weights[i] > 0) << "token data: the weight of " << dirs[i] << " is " << weights[i]
                               << ", it must be positive";
    d.source += (i ? ", " : "") + dirs[i];
    for (const char* part : {"train.bin", "val.bin"}) {
      auto file =
          std::make_shared<const TokenFile>((fs::path(dirs[i]) / part).string(), vocab_size);
      LOOM_CHECK(file->size() >= min_tokens)
          << "token file " << file->path() << " has " << file->size()
          << " tokens, it needs at least model.context + 2 = " << min_tokens;
      (part[0] == 't' ? d.train : d.val).add(std::move(file), weights[i]);
    }
    check_prepared_with(dirs[i], tok, pattern);
  }
  return d;
}

Window draw_window(const TokenSet& set, uint64_t key, int64_t g, int64_t T) {
  const auto r = philox4x32_10(uint64_t(g), 0, key);
  Window w;
  if (set.streams() > 1) {
    double total = 0;
    for (int s = 0; s < set.streams(); ++s) total += set.weight(s);
    double u = double(r[2]) / 4294967296.0 * total;
    for (w.stream = 0; w.stream + 1 < set.streams() && u >= set.weight(w.stream); ++w.stream)
      u -= set.weight(w.stream);
  }
  const uint64_t v = uint64_t(r[0]) << 32 | r[1];
  w.start = int64_t(v % uint64_t(set.size(w.stream) - T));
  return w;
}

std::pair<Tensor, Tensor> gather_windows(const TokenSet& set, const std::vector<Window>& windows,
                                         int64_t T) {
  const int64_t B = int64_t(windows.size());
  std::vector<int64_t> ids(size_t(B * T)), targets(size_t(B * T));
  std::vector<int32_t> w(size_t(T + 1));
  for (int64_t b = 0; b < B; ++b) {
    set.read(windows[size_t(b)].stream, windows[size_t(b)].start, T + 1, w.data());
    for (int64_t t = 0; t < T; ++t) {
      ids[size_t(b * T + t)] = w[size_t(t)];
      targets[size_t(b * T + t)] = w[size_t(t + 1)];
    }
  }
  return {from_vector(ids, {B, T}), from_vector(targets, {B, T})};
}

std::vector<Window> eval_windows(const TokenSet& set, int64_t T, int64_t count) {
  std::vector<Window> windows;
  for (int s = 0; s < set.streams(); ++s) {
    const int64_t tiles = (set.size(s) - 1) / T;
    const int64_t want = count <= 0 ? 0 : std::max<int64_t>(1, count / set.streams());
    if (want <= 0 || want >= tiles) {
      for (int64_t i = 0; i < tiles; ++i) windows.push_back({s, i * T});
    } else if (want == 1) {
      windows.push_back({s, 0});
    } else {
      for (int64_t i = 0; i < want; ++i) windows.push_back({s, i * (tiles - 1) / (want - 1) * T});
    }
  }
  return windows;
}

}  // namespace loom
