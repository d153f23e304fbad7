// BpeTokenizer: encoding, decoding and the file format. Training is in bpe_train.cpp.
#include "loom/data/bpe.h"

#include <charconv>
#include <sstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/data/text.h"

namespace loom {
namespace {
constexpr const char* kMagicLine = "loom-bpe 1";
}  // namespace

BpeTokenizer::BpeTokenizer() : BpeTokenizer({}, "byte tokenizer") {}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges,
                           const std::string& origin)
    : merges_(std::move(merges)) {
  tokens_.reserve(kByteTokens + merges_.size());
  for (int b = 0; b < kByteTokens; ++b) tokens_.push_back(std::string(1, char(b)));
  for (size_t k = 0; k < merges_.size(); ++k) {
    const auto [left, right] = merges_[k];
    const int32_t known = int32_t(tokens_.size());
    LOOM_CHECK(left >= 0 && left < known && right >= 0 && right < known)
        << origin << ": merge " << k << " (" << left << ", " << right
        << ") refers to a token that does not exist yet (ids must be < " << known << ")";
    const auto [it, fresh] = rank_.emplace(detail::bpe_pair_key(left, right), int32_t(k));
    LOOM_CHECK(fresh) << origin << ": merge " << k << " (" << left << ", " << right
                      << ") repeats merge " << it->second;
    tokens_.push_back(tokens_[size_t(left)] + tokens_[size_t(right)]);
  }
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size())
      << "BPE token id " << id << " is outside [0, " << vocab_size() << ")";
  return tokens_[size_t(id)];
}

std::vector<int32_t> BpeTokenizer::encode_piece(const uint8_t* bytes, size_t n) const {
  std::vector<int32_t> ids(bytes, bytes + n);
  // Pieces are short (<= kMaxPieceBytes), so a rescan per merge is cheap and plainly matches
  // replaying the merges in learned order.
  while (ids.size() > 1) {
    int32_t best = -1;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = rank_.find(detail::bpe_pair_key(ids[i], ids[i + 1]));
      if (it != rank_.end() && (best < 0 || it->second < best)) best = it->second;
    }
    if (best < 0) break;
    const auto [left, right] = merges_[size_t(best)];
    const int32_t merged = kByteTokens + best;
    size_t out = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
        ids[out++] = merged;
        ++i;
      } else {
        ids[out++] = ids[i];
      }
    }
    ids.resize(out);
  }
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  // Natural text repeats the same few thousand pieces; encode each distinct one once per call.
  std::unordered_map<std::string_view, std::vector<int32_t>> seen;
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  detail::for_each_bpe_piece(text, [&](size_t offset, size_t length) {
    const std::string_view piece(text.data() + offset, length);
    auto it = seen.find(piece);
    if (it == seen.end()) it = seen.emplace(piece, encode_piece(bytes + offset, length)).first;
    out.insert(out.end(), it->second.begin(), it->second.end());
  });
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_CHECK(ids[i] >= 0 && ids[i] < vocab_size())
        << "BPE decode: token " << ids[i] << " at position " << i << " is outside [0, "
        << vocab_size() << ")";
    out += tokens_[size_t(ids[i])];
  }
  return out;
}

void BpeTokenizer::save(const std::string& path) const {
  std::ostringstream text;
  text << kMagicLine << "\nmerges " << merges_.size() << "\n";
  for (const auto& [left, right] : merges_) text << left << " " << right << "\n";
  AtomicFile out(path);
  out.write(text.str());
  out.commit();
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.emplace_back(text.data() + start, end - start);
    start = end + 1;
  }
  LOOM_CHECK(!lines.empty() && lines[0] == kMagicLine)
      << "BPE file " << path << ": line 1 is '" << (lines.empty() ? "" : std::string(lines[0]))
      << "', expected '" << kMagicLine << "' (not a Loom BPE file, or another version)";

  // Parses a non-negative decimal that must fill `s` exactly.
  auto parse_int = [&](std::string_view s, size_t line_no, const char* what) {
    int64_t value = -1;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    LOOM_CHECK(ec == std::errc() && end == s.data() + s.size() && value >= 0 && value < (1 << 30))
        << "BPE file " << path << ": line " << line_no << " has " << what << " '" << s
        << "', expected a non-negative integer";
    return value;
  };
  LOOM_CHECK(lines.size() >= 2 && lines[1].substr(0, 7) == "merges ")
      << "BPE file " << path << ": line 2 should be 'merges <count>'";
  const int64_t count = parse_int(lines[1].substr(7), 2, "merge count");
  LOOM_CHECK(int64_t(lines.size()) == count + 2)
      << "BPE file " << path << ": header promises " << count << " merges but the file has "
      << int64_t(lines.size()) - 2 << " merge lines (truncated or extra lines?)";

  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(size_t(count));
  for (size_t i = 2; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const size_t space = line.find(' ');
    LOOM_CHECK(space != std::string_view::npos) << "BPE file " << path << ": line " << i + 1
                                                << " is '" << line << "', expected 'left right'";
    merges.emplace_back(int32_t(parse_int(line.substr(0, space), i + 1, "left id")),
                        int32_t(parse_int(line.substr(space + 1), i + 1, "right id")));
  }
  return BpeTokenizer(std::move(merges), "BPE file " + path);
}

}  // namespace loom
