#include "loom/data/tokenizer_files.h"

#include <array>
#include <charconv>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/data/pretokenize.h"
#include "loom/data/text.h"

namespace loom {
namespace {

using nlohmann::json;

// Hugging Face's ByteLevel pre-tokenizer regex (tokenizers, byte_level.rs), GPT-2's original.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Loom's own pieces (bpe.h) as a regex: whitespace bytes, then other bytes.
constexpr const char* kLoomPiecePattern = R"([\t-\r ]*[^\t-\r ]+|[\t-\r ]+)";

// GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the other 68
// bytes for the code points 256, 257, ... in byte order, so every token is printable text.
struct ByteChars {
  std::array<uint32_t, 256> of_byte{};
  std::unordered_map<uint32_t, uint8_t> byte_of;
  ByteChars() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      of_byte[b] = printable ? b : next++;
      byte_of[of_byte[b]] = uint8_t(b);
    }
  }
};
const ByteChars& byte_chars() {
  static const ByteChars table;
  return table;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6);
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xE0 | cp >> 12);
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// A vocabulary entry ("Ġthe") back to its bytes (" the"); throws for a character outside the
// table.
std::string entry_bytes(const std::string& entry, const std::string& origin) {
  std::string out;
  for (size_t i = 0; i < entry.size();) {
    const auto c = uint8_t(entry[i]);
    const int len = c < 0x80 ? 1 : c >> 5 == 6 ? 2 : c >> 4 == 14 ? 3 : 0;
    LOOM_CHECK(len > 0 && i + size_t(len) <= entry.size())
        << origin << ": vocabulary entry '" << entry << "' is not byte-level BPE text";
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : c & 0x0F;
    for (int k = 1; k < len; ++k) cp = cp << 6 | (uint8_t(entry[i + size_t(k)]) & 0x3F);
    const auto it = byte_chars().byte_of.find(cp);
    LOOM_CHECK(it != byte_chars().byte_of.end())
        << origin << ": vocabulary entry '" << entry << "' has the character U+" << std::hex << cp
        << std::dec << ", which stands for no byte (not a byte-level BPE)";
    out += char(it->second);
    i += size_t(len);
  }
  return out;
}

std::string entry_of(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) append_utf8(out, byte_chars().of_byte[uint8_t(c)]);
  return out;
}

json parse_json_file(const std::string& path) {
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    LOOM_FAIL() << "tokenizer file " << path << " is not valid JSON: " << e.what();
  }
  return {};
}

bool null_or(const json& j, const char* key, const json& allowed) {
  return !j.contains(key) || j[key].is_null() || j[key] == allowed;
}

// The vocabulary ({"entry": id}) and the added tokens as token bytes by id; text_of: an
// entry's bytes (byte-level BPE: entry_bytes).
void read_vocab(const json& vocab, const json& added, const std::string& origin,
                BpeTokenizer::Parts& parts,
                const std::function<std::string(const std::string&)>& text_of) {
  LOOM_CHECK(vocab.is_object()) << origin << ": the vocabulary is not a JSON object";
  std::vector<std::string> tokens;
  std::vector<bool> have, special;
  auto put = [&](int64_t id, const std::string& bytes, bool is_special, const std::string& what) {
    LOOM_CHECK(id >= 0 && id < (int64_t(1) << 24))
        << origin << ": " << what << " has the id " << id << ", outside [0, 2^24)";
    if (size_t(id) >= tokens.size()) {
      tokens.resize(size_t(id) + 1);
      have.resize(size_t(id) + 1, false);
      special.resize(size_t(id) + 1, false);
    }
    LOOM_CHECK(!have[size_t(id)] || is_special)
        << origin << ": " << what << " and another token both have the id " << id;
    tokens[size_t(id)] = bytes;
    have[size_t(id)] = true;
    special[size_t(id)] = is_special;
  };
  std::unordered_set<std::string> added_text;
  for (const json& a : added) added_text.insert(a.value("content", ""));
  for (const auto& [entry, id] : vocab.items()) {
    LOOM_CHECK(id.is_number_integer())
        << origin << ": vocabulary entry '" << entry << "' has no integer id";
    // An added token may stand in the vocabulary too (GPT-2's <|endoftext|>); it is not text.
    const bool is_added = added_text.count(entry) > 0;
    put(id.get<int64_t>(), is_added ? entry : text_of(entry), is_added,
        "vocabulary entry '" + entry + "'");
  }
  for (const json& a : added) {
    LOOM_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
               a.contains("content") && a["content"].is_string())
        << origin << ": an added token lacks its id or content: " << a.dump();
    put(a["id"].get<int64_t>(), a["content"].get<std::string>(), true,
        "added token '" + a["content"].get<std::string>() + "'");
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    LOOM_CHECK(have[id]) << origin << ": no token has the id " << id << " (ids must run from 0 to "
                         << tokens.size() - 1 << " without gaps)";
  parts.tokens = std::move(tokens);
  parts.special = std::move(special);
}

// Merges "left right" (or ["left", "right"]) as id pairs.
void add_merge(const std::string& left, const std::string& right, size_t k,
               const std::unordered_map<std::string, int32_t>& id_of, const std::string& origin,
               BpeTokenizer::Parts& parts) {
  const auto l = id_of.find(left), r = id_of.find(right);
  LOOM_CHECK(l != id_of.end() && r != id_of.end())
      << origin << ": merge " << k + 1 << " '" << left << " " << right
      << "' names a token that is not in the vocabulary";
  parts.merges.emplace_back(l->second, r->second);
}

std::unordered_map<std::string, int32_t> ids_by_entry(const json& vocab) {
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [entry, id] : vocab.items()) id_of[entry] = id.get<int32_t>();
  return id_of;
}

void split_merge_line(const std::string& line, size_t k, const std::string& origin,
                      std::string& left, std::string& right) {
  const size_t space = line.find(' ');
  LOOM_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
             line.find(' ', space + 1) == std::string::npos)
      << origin << ": merge " << k + 1 << " is '" << line << "', expected 'left right'";
  left = line.substr(0, space);
  right = line.substr(space + 1);
}

// The pre-tokenizer of a tokenizer.json: the regex that cuts pieces, or an error naming what
// is not supported.
std::string piece_pattern(const json& pre, const std::string& origin) {
  LOOM_CHECK(pre.is_object()) << origin << ": no pre_tokenizer, so not a byte-level BPE";
  const std::string type = pre.value("type", "");
  auto byte_level = [&](const json& p) {
    LOOM_CHECK(!p.value("add_prefix_space", false))
        << origin << ": ByteLevel with add_prefix_space is not supported";
    return p.value("use_regex", true);
  };
  if (type == "ByteLevel") {
    LOOM_CHECK(byte_level(pre)) << origin << ": ByteLevel without its regex and no Split before "
                                << "it would make the whole text one piece";
    return kByteLevelPattern;
  }
  LOOM_CHECK(type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
      << origin << ": pre_tokenizer '" << type << "' is not supported (ByteLevel, or Split then "
      << "ByteLevel)";
  const json& steps = pre["pretokenizers"];
  if (steps.size() == 1 && steps[0].value("type", "") == "ByteLevel")
    return piece_pattern(steps[0], origin);
  LOOM_CHECK(steps.size() == 2 && steps[0].value("type", "") == "Split" &&
             steps[1].value("type", "") == "ByteLevel")
      << origin << ": pre_tokenizer Sequence " << pre.dump().substr(0, 200)
      << " is not supported (ByteLevel, or Split then ByteLevel)";
  const json& split = steps[0];
  LOOM_CHECK(split.value("behavior", "") == "Isolated" && !split.value("invert", false) &&
             split.contains("pattern") && split["pattern"].contains("Regex"))
      << origin << ": only a Split by a Regex with behavior Isolated (not inverted) is supported";
  LOOM_CHECK(!byte_level(steps[1]))
      << origin << ": ByteLevel with its own regex after a Split is not supported";
  return split["pattern"]["Regex"].get<std::string>();
}

// The model's merges ("left right" strings or [left, right] pairs) as id pairs.
void read_merges(const json& model, const std::string& origin, BpeTokenizer::Parts& parts) {
  const auto id_of = ids_by_entry(model["vocab"]);
  const json merges = model.value("merges", json::array());
  for (size_t k = 0; k < merges.size(); ++k) {
    std::string left, right;
    if (merges[k].is_array() && merges[k].size() == 2) {
      left = merges[k][0].get<std::string>();
      right = merges[k][1].get<std::string>();
    } else {
      LOOM_CHECK(merges[k].is_string()) << origin << ": merge " << k + 1 << " is "
                                        << merges[k].dump() << ", expected \"left right\"";
      split_merge_line(merges[k].get<std::string>(), k, origin, left, right);
    }
    add_merge(left, right, k, id_of, origin, parts);
  }
}

constexpr const char* kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A SentencePiece entry's text: each U+2581 a space.
std::string spaced(const std::string& entry) {
  std::string out;
  for (size_t i = 0; i < entry.size(); ++i) {
    if (entry.compare(i, 3, kSpaceMark) == 0) {
      out += ' ';
      i += 2;
    } else {
      out += entry[i];
    }
  }
  return out;
}

// The byte of a byte-fallback entry "<0xNN>" (two upper-case hex digits), or -1.
int fallback_byte(const std::string& entry) {
  if (entry.size() != 6 || entry.compare(0, 3, "<0x") != 0 || entry[5] != '>') return -1;
  int value = 0;
  for (const char c : entry.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// A SentencePiece-style BPE (model.byte_fallback): Llama 2's layout (normalizer Prepend "\u2581"
// then Replace " " by it, no pre-tokenizer) or the newer one (no normalizer, the Metaspace
// pre-tokenizer: its prepend_scheme and split). Anything else is refused by name.
BpeTokenizer read_sentencepiece_json(const json& j, const std::string& origin) {
  const json& model = j["model"];
  LOOM_CHECK(null_or(model, "dropout", 0.0) && null_or(model, "continuing_subword_prefix", "") &&
             null_or(model, "end_of_word_suffix", "") && !model.value("ignore_merges", false))
      << origin << ": BPE dropout, continuing_subword_prefix, end_of_word_suffix and "
      << "ignore_merges are not supported with byte_fallback";
  BpeTokenizer::Parts parts;
  const json added = j.value("added_tokens", json::array());
  const json& vocab = model.value("vocab", json());
  read_vocab(vocab, added, origin, parts, [](const std::string& entry) {
    const int byte = fallback_byte(entry);
    return byte >= 0 ? std::string(1, char(byte)) : spaced(entry);
  });
  parts.byte_tokens.assign(BpeTokenizer::kByteTokens, -1);
  for (const auto& [entry, id] : vocab.items()) {
    const int byte = fallback_byte(entry);
    if (byte >= 0 && !parts.special[size_t(id.get<int64_t>())])
      parts.byte_tokens[size_t(byte)] = id.get<int32_t>();
  }
  for (int b = 0; b < BpeTokenizer::kByteTokens; ++b)
    LOOM_CHECK(parts.byte_tokens[size_t(b)] >= 0)
        << origin << ": byte_fallback, but the vocabulary has no <0x" << std::hex << std::uppercase
        << (b < 16 ? "0" : "") << b << std::dec << "> token (it needs all 256)";
  read_merges(model, origin, parts);

  const json normalizer = j.value("normalizer", json()), pre = j.value("pre_tokenizer", json());
  auto refuse = [&](const json& what, const char* where) {
    LOOM_FAIL() << origin << ": " << where << " " << what.dump().substr(0, 200)
                << " is not supported with byte_fallback (Llama 2's Prepend + Replace "
                << "normalizer, or the Metaspace pre-tokenizer)";
  };
  if (!normalizer.is_null()) {
    const json steps = normalizer.value("type", "") == "Sequence"
                           ? normalizer.value("normalizers", json::array())
                           : json::array({normalizer});
    size_t k = 0;
    parts.prefix = BpeTokenizer::Parts::Prefix::None;
    if (k < steps.size() && steps[k].value("type", "") == "Prepend") {
      if (steps[k].value("prepend", "") != kSpaceMark) refuse(steps[k], "normalizer");
      parts.prefix = BpeTokenizer::Parts::Prefix::Always;
      ++k;
    }
    if (k + 1 != steps.size() || steps[k].value("type", "") != "Replace" ||
        steps[k].value("pattern", json()) != json({{"String", " "}}) ||
        steps[k].value("content", "") != kSpaceMark)
      refuse(normalizer, "normalizer");
    if (!pre.is_null()) refuse(pre, "pre_tokenizer");
    parts.split_at_spaces = false;
  } else {
    if (pre.value("type", "") != "Metaspace" || pre.value("replacement", "") != kSpaceMark)
      refuse(pre, "pre_tokenizer");
    const std::string scheme = pre.contains("prepend_scheme")
                                   ? pre.value("prepend_scheme", "always")
                               : pre.value("add_prefix_space", true) ? "always"
                                                                     : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never") refuse(pre, "pre_tokenizer");
    // Metaspace prepends its mark only to a text that does not start with one.
    parts.prefix = scheme == "never" ? BpeTokenizer::Parts::Prefix::None
                                     : BpeTokenizer::Parts::Prefix::UnlessSpaced;
    parts.split_at_spaces = pre.value("split", true);
  }
  return BpeTokenizer::from_parts(std::move(parts), origin);
}

}  // namespace

BpeTokenizer read_tokenizer_json(const std::string& path) {
  const std::string origin = "tokenizer.json " + path;
  const json j = parse_json_file(path);
  LOOM_CHECK(j.is_object() && j.contains("model") && j["model"].is_object())
      << origin << ": no \"model\" object (not a Hugging Face tokenizer.json)";
  const json& model = j["model"];
  const std::string type = model.value("type", "");
  LOOM_CHECK(type == "BPE") << origin << ": model type '" << type
                            << "' is not supported (only byte-level BPE)";
  if (model.value("byte_fallback", false)) return read_sentencepiece_json(j, origin);
  LOOM_CHECK(!j.contains("normalizer") || j["normalizer"].is_null())
      << origin << ": normalizer " << j["normalizer"].dump() << " is not supported";
  LOOM_CHECK(null_or(model, "dropout", 0.0) && null_or(model, "continuing_subword_prefix", "") &&
             null_or(model, "end_of_word_suffix", ""))
      << origin << ": BPE dropout, continuing_subword_prefix and end_of_word_suffix are not "
      << "supported";

  BpeTokenizer::Parts parts;
  const json added = j.value("added_tokens", json::array());
  read_vocab(model.value("vocab", json()), added, origin, parts,
             [&](const std::string& entry) { return entry_bytes(entry, origin); });
  read_merges(model, origin, parts);
  parts.pattern = piece_pattern(j.value("pre_tokenizer", json()), origin);
  parts.whole_piece_first = model.value("ignore_merges", false);
  return BpeTokenizer::from_parts(std::move(parts), origin);
}

BpeTokenizer read_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  const std::string origin = "vocab.json " + vocab_json + " with merges " + merges_txt;
  BpeTokenizer::Parts parts;
  const json vocab = parse_json_file(vocab_json);
  read_vocab(vocab, json::array(), origin, parts,
             [&](const std::string& entry) { return entry_bytes(entry, origin); });
  // GPT-2's <|endoftext|> is a vocabulary entry that no merge makes: a special token.
  for (size_t id = 0; id < parts.tokens.size(); ++id)
    if (parts.tokens[id] == "<|endoftext|>") parts.special[id] = true;
  const auto id_of = ids_by_entry(vocab);
  const std::string text = read_text_file(merges_txt);
  size_t k = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    start = end + 1;
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    std::string left, right;
    split_merge_line(line, k, origin, left, right);
    add_merge(left, right, k++, id_of, origin, parts);
  }
  parts.pattern = kByteLevelPattern;
  return BpeTokenizer::from_parts(std::move(parts), origin);
}

BpeTokenizer read_tiktoken(const std::string& path, const std::string& pattern_name) {
  const std::string origin = "tiktoken file " + path;
  BpeTokenizer::Parts parts;
  parts.pattern = known_piece_pattern(pattern_name);
  LOOM_CHECK(!parts.pattern.empty()) << origin << ": unknown pre-tokenisation pattern '"
                                     << pattern_name << "' (gpt2, cl100k or o200k)";
  auto sextet = [](char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  const std::string text = read_text_file(path);
  std::vector<bool> have;
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    LOOM_CHECK(space != std::string_view::npos)
        << origin << ": line " << line_no << " is not 'base64-bytes rank'";
    std::string bytes;
    uint32_t bits = 0;
    int nbits = 0;
    size_t i = 0;
    for (; i < space && line[i] != '='; ++i) {
      const int v = sextet(line[i]);
      LOOM_CHECK(v >= 0) << origin << ": line " << line_no << " has '" << line[i]
                         << "' in its base64 bytes";
      bits = bits << 6 | uint32_t(v);
      nbits += 6;
      if (nbits >= 8) {
        nbits -= 8;
        bytes += char(bits >> nbits & 0xFF);
      }
    }
    int64_t rank = -1;
    const auto [p, ec] = std::from_chars(line.data() + space + 1, line.data() + line.size(), rank);
    LOOM_CHECK(ec == std::errc() && p == line.data() + line.size() && rank >= 0 &&
               rank < (int64_t(1) << 24) && !bytes.empty())
        << origin << ": line " << line_no << " is not 'base64-bytes rank'";
    if (size_t(rank) >= parts.tokens.size()) {
      parts.tokens.resize(size_t(rank) + 1);
      have.resize(size_t(rank) + 1, false);
    }
    LOOM_CHECK(!have[size_t(rank)]) << origin << ": rank " << rank << " appears twice";
    have[size_t(rank)] = true;
    parts.tokens[size_t(rank)] = std::move(bytes);
  }
  for (size_t r = 0; r < have.size(); ++r)
    LOOM_CHECK(have[r]) << origin << ": no token has rank " << r;
  parts.special.assign(parts.tokens.size(), false);
  if (pattern_name == "gpt2") {
    parts.tokens.push_back("<|endoftext|>");
    parts.special.push_back(true);
  }
  parts.whole_piece_first = true;
  return BpeTokenizer::from_parts(std::move(parts), origin);
}

namespace {

// A SentencePiece-style tokenizer.json: Llama 2's layout for a prefix space always added, else
// the Metaspace pre-tokenizer; the decoder drops the prefix space again.
nlohmann::ordered_json sentencepiece_json(const BpeTokenizer::Parts& parts,
                                          const nlohmann::ordered_json& added,
                                          const nlohmann::ordered_json& vocab,
                                          const nlohmann::ordered_json& merges) {
  using ojson = nlohmann::ordered_json;
  using Prefix = BpeTokenizer::Parts::Prefix;
  const ojson replace = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpaceMark}};
  ojson normalizer = nullptr, pre = nullptr;
  if (parts.prefix == Prefix::Always)
    normalizer = {{"type", "Sequence"},
                  {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpaceMark}}, replace}}};
  if (parts.prefix != Prefix::Always || parts.split_at_spaces)
    pre = {{"type", "Metaspace"},
           {"replacement", kSpaceMark},
           {"prepend_scheme", parts.prefix == Prefix::UnlessSpaced ? "always" : "never"},
           {"split", parts.split_at_spaces}};
  ojson decoders =
      ojson::array({{{"type", "Replace"}, {"pattern", {{"String", kSpaceMark}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}});
  if (parts.prefix != Prefix::None)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  ojson unk = nullptr;
  for (size_t id = 0; id < parts.tokens.size(); ++id)
    if (parts.special[id] && parts.tokens[id] == "<unk>") unk = "<unk>";
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", unk},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace

void write_tokenizer_json(const BpeTokenizer& tok, const std::string& path) {
  const BpeTokenizer::Parts& parts = tok.parts();
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object(),
                         added = nlohmann::ordered_json::array(),
                         merges = nlohmann::ordered_json::array();
  const bool sp = parts.sentencepiece();
  std::vector<std::string> entry(parts.tokens.size());
  for (size_t b = 0; b < parts.byte_tokens.size(); ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", unsigned(b));
    entry[size_t(parts.byte_tokens[b])] = name;
  }
  for (size_t id = 0; id < parts.tokens.size(); ++id) {
    if (sp && !entry[id].empty()) {  // a byte token, named above
    } else if (parts.special[id]) {
      entry[id] = parts.tokens[id];
    } else if (sp) {  // spaces as SentencePiece's mark
      for (const char c : parts.tokens[id]) entry[id] += c == ' ' ? kSpaceMark : std::string(1, c);
    } else {
      entry[id] = entry_of(parts.tokens[id]);
    }
    LOOM_CHECK(!vocab.contains(entry[id]))
        << "tokenizer.json " << path << ": tokens " << vocab[entry[id]].get<int>() << " and " << id
        << " are the same bytes, which a tokenizer.json vocabulary cannot hold";
    vocab[entry[id]] = id;
    if (parts.special[id])
      added.push_back({{"id", id},
                       {"content", entry[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  }
  for (const auto& [left, right] : tok.merge_list())
    merges.push_back(entry[size_t(left)] + " " + entry[size_t(right)]);
  const std::string pattern = parts.pattern.empty() ? kLoomPiecePattern : parts.pattern;
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                             {"add_prefix_space", false},
                                             {"trim_offsets", false},
                                             {"use_regex", false}};
  if (sp) {
    write_file_atomic(path, sentencepiece_json(parts, added, vocab, merges).dump(1) + "\n");
    return;
  }
  const nlohmann::ordered_json out = {{"version", "1.0"},
                                      {"truncation", nullptr},
                                      {"padding", nullptr},
                                      {"added_tokens", added},
                                      {"normalizer", nullptr},
                                      {"pre_tokenizer",
                                       {{"type", "Sequence"},
                                        {"pretokenizers",
                                         {{{"type", "Split"},
                                           {"pattern", {{"Regex", pattern}}},
                                           {"behavior", "Isolated"},
                                           {"invert", false}},
                                          byte_level}}}},
                                      {"post_processor", nullptr},
                                      {"decoder", byte_level},
                                      {"model",
                                       {{"type", "BPE"},
                                        {"dropout", nullptr},
                                        {"unk_token", nullptr},
                                        {"continuing_subword_prefix", nullptr},
                                        {"end_of_word_suffix", nullptr},
                                        {"fuse_unk", false},
                                        {"byte_fallback", false},
                                        {"ignore_merges", parts.whole_piece_first},
                                        {"vocab", vocab},
                                        {"merges", merges}}}};
  write_file_atomic(path, out.dump(1) + "\n");
}

}  // namespace loom
