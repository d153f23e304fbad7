#include "loom/data/token_windows.h"

#include <filesystem>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/text.h"
#include "loom/ops/creation.h"

namespace loom {

namespace fs = std::filesystem;

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  if (!bytes) return bpe.encode(text);
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = int32_t(uint8_t(text[i]));
  return ids;
}

Tokenizer load_tokenizer(const std::string& spec, int64_t vocab_size,
                         const std::string& saved_copy) {
  Tokenizer t;
  if (spec == "bytes") {
    LOOM_CHECK(vocab_size == BpeTokenizer::kByteTokens)
        << "data.tokenizer \"bytes\" has 256 tokens but model.vocab_size is " << vocab_size;
    return t;
  }
  t.bytes = false;
  const std::string path =
      !saved_copy.empty() && fs::is_regular_file(saved_copy) ? saved_copy : spec;
  LOOM_CHECK(fs::is_regular_file(path))
      << "data.tokenizer " << path << " does not exist (expected \"bytes\" or a BPE file made by "
      << "`loom tokenizer train`)";
  t.bpe = BpeTokenizer::load(path);
  LOOM_CHECK(t.bpe.vocab_size() == vocab_size)
      << "data.tokenizer " << path << " has " << t.bpe.vocab_size()
      << " tokens but model.vocab_size is " << vocab_size;
  return t;
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
