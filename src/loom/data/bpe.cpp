// BpeTokenizer: encoding, decoding and the file format. Training is in bpe_train.cpp.
#include "loom/data/bpe.h"

#include <charconv>
#include <queue>
#include <sstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/data/pretokenize.h"
#include "loom/data/text.h"

namespace loom {
namespace {
constexpr const char* kMagicLine = "loom-bpe 1";
}  // namespace

BpeTokenizer::BpeTokenizer() : BpeTokenizer({}, "byte tokenizer") {}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges,
                           const std::string& origin) {
  Parts parts;
  for (int b = 0; b < kByteTokens; ++b) parts.tokens.push_back(std::string(1, char(b)));
  for (size_t k = 0; k < merges.size(); ++k) {
    const auto [left, right] = merges[k];
    const int32_t known = int32_t(parts.tokens.size());
    LOOM_CHECK(left >= 0 && left < known && right >= 0 && right < known)
        << origin << ": merge " << k << " (" << left << ", " << right
        << ") refers to a token that does not exist yet (ids must be < " << known << ")";
    parts.tokens.push_back(parts.tokens[size_t(left)] + parts.tokens[size_t(right)]);
  }
  parts.merges = std::move(merges);
  // Several merges may spell the same bytes; each keeps its own id 256 + k.
  *this = from_parts(std::move(parts), origin);
  pair_.clear();
  for (size_t k = 0; k < parts_.merges.size(); ++k) {
    const auto [left, right] = parts_.merges[k];
    const auto [it, fresh] = pair_.emplace(detail::bpe_pair_key(left, right),
                                           Merge{int32_t(k), int32_t(kByteTokens + k)});
    LOOM_CHECK(fresh) << origin << ": merge " << k << " (" << left << ", " << right
                      << ") repeats merge " << it->second.priority;
  }
}

BpeTokenizer BpeTokenizer::from_parts(Parts parts, const std::string& origin) {
  BpeTokenizer t{Bare{}};
  const int32_t n = int32_t(parts.tokens.size());
  LOOM_CHECK(parts.special.empty() || parts.special.size() == parts.tokens.size())
      << origin << ": special flags for " << parts.special.size() << " of " << n << " tokens";
  parts.special.resize(size_t(n), false);
  // SentencePiece: the byte tokens <0xNN>, apart from the text tokens (a token "A" and <0x41>
  // both stand for the byte A).
  std::vector<bool> byte_token(size_t(n), false);
  if (parts.sentencepiece()) {
    LOOM_CHECK(parts.byte_tokens.size() == size_t(kByteTokens))
        << origin << ": " << parts.byte_tokens.size() << " byte tokens, expected 256";
    for (int b = 0; b < kByteTokens; ++b) {
      const int32_t id = parts.byte_tokens[size_t(b)];
      LOOM_CHECK(id >= 0 && id < n && !parts.special[size_t(id)] &&
                 parts.tokens[size_t(id)] == std::string(1, char(b)))
          << origin << ": the token of byte 0x" << std::hex << b << std::dec << " (id " << id
          << ") is not that byte";
      byte_token[size_t(id)] = true;
      t.byte_token_[b] = id;
    }
  }
  for (int32_t id = 0; id < n; ++id) {
    if (parts.special[size_t(id)] || byte_token[size_t(id)]) continue;
    const std::string& bytes = parts.tokens[size_t(id)];
    LOOM_CHECK(!bytes.empty()) << origin << ": token " << id << " is empty";
    // A repeated spelling keeps its first id (Loom's own BPE may learn one twice).
    t.by_bytes_.emplace(bytes, id);
  }
  for (int b = 0; b < kByteTokens && !parts.sentencepiece(); ++b) {
    const auto it = t.by_bytes_.find(std::string(1, char(b)));
    LOOM_CHECK(it != t.by_bytes_.end())
        << origin << ": byte 0x" << std::hex << b << std::dec
        << " has no token, so some texts could not be encoded (a byte-level BPE has all 256)";
    t.byte_token_[b] = it->second;
  }
  auto token_of = [&](const std::string& bytes) {
    const auto it = t.by_bytes_.find(bytes);
    return it == t.by_bytes_.end() ? -1 : it->second;
  };
  if (!parts.merges.empty()) {
    for (size_t k = 0; k < parts.merges.size(); ++k) {
      const auto [left, right] = parts.merges[k];
      LOOM_CHECK(left >= 0 && left < n && right >= 0 && right < n && !parts.special[size_t(left)] &&
                 !parts.special[size_t(right)])
          << origin << ": merge " << k << " (" << left << ", " << right
          << ") names a token that is not in the vocabulary";
      const int32_t merged = token_of(parts.tokens[size_t(left)] + parts.tokens[size_t(right)]);
      LOOM_CHECK(merged >= 0) << origin << ": merge " << k << " makes a token that is not in "
                              << "the vocabulary";
      // A repeated merge keeps its first (higher) priority, as Hugging Face's tokenizers do.
      t.pair_.emplace(detail::bpe_pair_key(left, right), Merge{int32_t(k), merged});
    }
  } else {
    // By rank: every split of a token into two tokens is a merge making it, at its rank.
    for (int32_t id = 0; id < n; ++id) {
      const std::string& bytes = parts.tokens[size_t(id)];
      if (parts.special[size_t(id)] || bytes.size() < 2) continue;
      for (size_t cut = 1; cut < bytes.size(); ++cut) {
        const int32_t left = token_of(bytes.substr(0, cut)), right = token_of(bytes.substr(cut));
        if (left >= 0 && right >= 0 && token_of(bytes) == id)
          t.pair_.emplace(detail::bpe_pair_key(left, right), Merge{id, id});
      }
    }
  }
  if (!parts.pattern.empty()) t.regex_ = std::make_shared<const PieceRegex>(parts.pattern, origin);
  t.parts_ = std::move(parts);
  return t;
}

bool BpeTokenizer::is_loom_bpe() const {
  if (!parts_.pattern.empty() || parts_.whole_piece_first || parts_.sentencepiece() ||
      parts_.tokens.size() != kByteTokens + parts_.merges.size())
    return false;
  for (int b = 0; b < kByteTokens; ++b)
    if (parts_.tokens[size_t(b)] != std::string(1, char(b)) || parts_.special[size_t(b)])
      return false;
  for (size_t k = 0; k < parts_.merges.size(); ++k) {
    const auto it =
        pair_.find(detail::bpe_pair_key(parts_.merges[k].first, parts_.merges[k].second));
    if (it == pair_.end() || it->second.merged != int32_t(kByteTokens + k)) return false;
  }
  return true;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size())
      << "BPE token id " << id << " is outside [0, " << vocab_size() << ")";
  return parts_.tokens[size_t(id)];
}

int32_t BpeTokenizer::special_id(const std::string& text) const {
  for (int32_t id = 0; id < vocab_size(); ++id)
    if (parts_.special[size_t(id)] && parts_.tokens[size_t(id)] == text) return id;
  return -1;
}

std::vector<std::pair<int32_t, int32_t>> BpeTokenizer::merge_list() const {
  if (!parts_.merges.empty() || pair_.empty()) return parts_.merges;
  std::vector<std::pair<int32_t, int32_t>> merges;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string& bytes = parts_.tokens[size_t(id)];
    if (parts_.special[size_t(id)] || bytes.size() < 2) continue;
    const auto halves =
        encode_piece(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), id);
    if (halves.size() == 2) merges.emplace_back(halves[0], halves[1]);
  }
  return merges;
}

std::vector<int32_t> BpeTokenizer::encode_piece(const uint8_t* bytes, size_t n,
                                                int32_t limit) const {
  if (parts_.whole_piece_first && n > 1 && limit == INT32_MAX) {
    const auto it = by_bytes_.find(std::string(reinterpret_cast<const char*>(bytes), n));
    if (it != by_bytes_.end()) return {it->second};
  }
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = byte_token_[bytes[i]];
  // Pieces are short, so a rescan per merge is cheap and plainly matches the rule above.
  while (ids.size() > 1) {
    size_t best = 0;
    Merge merge{-1, -1};
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = pair_.find(detail::bpe_pair_key(ids[i], ids[i + 1]));
      if (it != pair_.end() && it->second.priority < limit &&
          (merge.priority < 0 || it->second.priority < merge.priority)) {
        merge = it->second;
        best = i;
      }
    }
    if (merge.priority < 0) break;
    ids[best] = merge.merged;
    ids.erase(ids.begin() + std::ptrdiff_t(best) + 1);
  }
  return ids;
}

void BpeTokenizer::merge_all(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  // The symbols as a linked list over their first positions; a candidate is a pair that was
  // adjacent when pushed, still valid if both its symbols are (a merge changes the left one).
  std::vector<size_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? n : i - 1;
    next[i] = i + 1;
  }
  struct Candidate {
    int32_t priority;
    size_t pos;
    int32_t left, right, merged;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  auto push = [&](size_t i) {
    if (next[i] >= n) return;
    const auto it = pair_.find(detail::bpe_pair_key(ids[i], ids[next[i]]));
    if (it != pair_.end())
      heap.push({it->second.priority, i, ids[i], ids[next[i]], it->second.merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t r = next[c.pos];
    if (!alive[c.pos] || ids[c.pos] != c.left || r >= n || ids[r] != c.right) continue;
    ids[c.pos] = c.merged;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] < n) prev[next[r]] = c.pos;
    if (prev[c.pos] < n) push(prev[c.pos]);
    push(c.pos);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) ids[kept++] = ids[i];
  ids.resize(kept);
}

std::vector<int32_t> BpeTokenizer::encode_sentencepiece(const std::string& text) const {
  // The text as the model sees it: a "\u2581" is the space it stands for; the prefix space.
  static const std::string kSpaceMark = "\xE2\x96\x81";
  std::string s;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
      s += ' ';
      i += kSpaceMark.size() - 1;
    } else {
      s += text[i];
    }
  }
  using Prefix = Parts::Prefix;
  if (parts_.prefix == Prefix::Always ||
      (parts_.prefix == Prefix::UnlessSpaced && (s.empty() || s[0] != ' ')))
    s.insert(s.begin(), ' ');
  std::vector<int32_t> out;
  out.reserve(s.size() / 3);
  auto piece = [&](size_t begin, size_t end) {
    std::vector<int32_t> ids;
    for (size_t i = begin; i < end;) {
      const auto c = uint8_t(s[i]);
      size_t len = c < 0x80 ? 1 : c >> 5 == 6 ? 2 : c >> 4 == 14 ? 3 : c >> 3 == 30 ? 4 : 1;
      if (i + len > end) len = 1;  // a cut sequence: its bytes
      const auto it = by_bytes_.find(s.substr(i, len));
      if (it != by_bytes_.end()) {
        ids.push_back(it->second);
      } else {  // byte fallback
        for (size_t k = 0; k < len; ++k) ids.push_back(byte_token_[uint8_t(s[i + k])]);
      }
      i += len;
    }
    merge_all(ids);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  if (!parts_.split_at_spaces) {
    piece(0, s.size());
    return out;
  }
  for (size_t start = 0; start < s.size();) {  // a piece before each space
    size_t end = s.find(' ', start + 1);
    if (end == std::string::npos) end = s.size();
    piece(start, end);
    start = end;
  }
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  if (parts_.sentencepiece()) return encode_sentencepiece(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  // Natural text repeats the same few thousand pieces; encode each distinct one once per call.
  std::unordered_map<std::string_view, std::vector<int32_t>> seen;
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  auto piece = [&](size_t offset, size_t length) {
    const std::string_view key(text.data() + offset, length);
    auto it = seen.find(key);
    if (it == seen.end()) it = seen.emplace(key, encode_piece(bytes + offset, length)).first;
    out.insert(out.end(), it->second.begin(), it->second.end());
  };
  if (regex_)
    regex_->for_each_piece(text, piece);
  else
    detail::for_each_bpe_piece(text, piece);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_CHECK(ids[i] >= 0 && ids[i] < vocab_size())
        << "BPE decode: token " << ids[i] << " at position " << i << " is outside [0, "
        << vocab_size() << ")";
    out += parts_.tokens[size_t(ids[i])];
  }
  // SentencePiece: the prefix space goes again.
  if (parts_.sentencepiece() && parts_.prefix != Parts::Prefix::None && !out.empty() &&
      out[0] == ' ')
    out.erase(0, 1);
  return out;
}

void BpeTokenizer::save(const std::string& path) const {
  LOOM_CHECK(is_loom_bpe()) << "BPE file " << path << ": only a tokenizer learned by Loom can be "
                            << "written in Loom's format (write tokenizer.json instead)";
  std::ostringstream text;
  text << kMagicLine << "\nmerges " << parts_.merges.size() << "\n";
  for (const auto& [left, right] : parts_.merges) text << left << " " << right << "\n";
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
