// Strict RFC 8259 parsing. Errors report line and column (1-based, in bytes) and what the
// parser expected there, because these files are edited by hand and read after crashes.
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>

#include "loom/checkpoint/json.h"
#include "loom/core/error.h"

namespace loom {

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& origin) : text_(text), origin_(origin) {}

  Json parse_document() {
    Json root = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("end of input after the top-level value");
    return root;
  }

 private:
  // Deep enough for any file Loom writes; shallow enough that a hostile file cannot overflow
  // the stack through recursion.
  static constexpr int kMaxDepth = 512;

  [[noreturn]] void fail(const std::string& expected) const { fail_at(pos_, expected); }

  [[noreturn]] void fail_at(size_t at, const std::string& expected) const {
    fail_at(at, expected, found_at(at));
  }

  [[noreturn]] void fail_at(size_t at, const std::string& expected,
                            const std::string& found) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    LOOM_FAIL() << "json: " << origin_ << (origin_.empty() ? "" : ", ") << "line " << line
                << ", column " << column << ": expected " << expected << ", got " << found;
  }

  std::string found_at(size_t at) const {
    if (at >= text_.size()) return "end of input";
    const unsigned char c = static_cast<unsigned char>(text_[at]);
    if (c < 0x20 || c >= 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "byte 0x%02x", c);
      return buf;
    }
    return std::string("'") + char(c) + "'";
  }

  void skip_whitespace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Json parse_value(int depth) {
    skip_whitespace();
    if (pos_ >= text_.size()) fail("a value");
    Json out;
    switch (text_[pos_]) {
      case '{':
        out = parse_object(depth + 1);
        break;
      case '[':
        out = parse_array(depth + 1);
        break;
      case '"':
        out = Json(parse_string());
        break;
      case 't':
        expect_literal("true");
        out = Json(true);
        break;
      case 'f':
        expect_literal("false");
        out = Json(false);
        break;
      case 'n':
        expect_literal("null");
        break;
      default:
        if (text_[pos_] == '-' || (text_[pos_] >= '0' && text_[pos_] <= '9')) {
          out = parse_number();
        } else {
          fail("a value (object, array, string, number, true, false or null)");
        }
    }
    return out;  // set() and push_back() name it for error messages
  }

  void expect_literal(const char* word) {
    const size_t n = std::strlen(word);
    if (text_.compare(pos_, n, word) != 0) {
      // Show the whole misspelt word ("got 'tru'"), not just its first letter.
      size_t end = pos_;
      while (end < text_.size() && end - pos_ < 16 && std::isalnum(uint8_t(text_[end]))) ++end;
      fail_at(pos_, std::string("'") + word + "'", "'" + text_.substr(pos_, end - pos_) + "'");
    }
    pos_ += n;
  }

  Json parse_object(int depth) {
    if (depth > kMaxDepth) fail("at most " + std::to_string(kMaxDepth) + " levels of nesting");
    ++pos_;  // '{'
    Json out = Json::object();
    skip_whitespace();
    if (consume('}')) return out;
    while (true) {
      skip_whitespace();
      const size_t key_pos = pos_;
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        fail(out.size() == 0 ? "a string key or '}'" : "a string key after ','");
      }
      std::string key = parse_string();
      if (out.contains(key)) fail_at(key_pos, "no duplicate keys (key '" + key + "' repeats)");
      skip_whitespace();
      if (!consume(':')) fail("':' after key '" + key + "'");
      out.set(key, parse_value(depth));
      skip_whitespace();
      if (consume('}')) return out;
      if (!consume(',')) fail("',' or '}' after the value of key '" + key + "'");
    }
  }

  Json parse_array(int depth) {
    if (depth > kMaxDepth) fail("at most " + std::to_string(kMaxDepth) + " levels of nesting");
    ++pos_;  // '['
    Json out = Json::array();
    skip_whitespace();
    if (consume(']')) return out;
    while (true) {
      out.push_back(parse_value(depth));
      skip_whitespace();
      if (consume(']')) return out;
      if (!consume(',')) fail("',' or ']' in array");
    }
  }

  unsigned parse_hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      unsigned d;
      if (c >= '0' && c <= '9')
        d = unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        d = unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        d = unsigned(c - 'A' + 10);
      else
        fail("4 hex digits after \\u");
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3f));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }

  void parse_escape(std::string& out) {
    const size_t start = pos_ - 1;  // the backslash
    if (pos_ >= text_.size()) fail("an escape character after '\\'");
    const char c = text_[pos_++];
    switch (c) {
      case '"':
        out += '"';
        return;
      case '\\':
        out += '\\';
        return;
      case '/':
        out += '/';
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'u':
        break;
      default:
        --pos_;
        fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
    }
    uint32_t cp = parse_hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff) fail_at(start, "a high surrogate before a low one");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      // Characters beyond the BMP arrive as a surrogate pair \uD83D\uDE00.
      if (text_.compare(pos_, 2, "\\u") != 0) fail("a low surrogate \\uDC00-\\uDFFF");
      pos_ += 2;
      const uint32_t low = parse_hex4();
      if (low < 0xdc00 || low > 0xdfff) fail_at(pos_ - 6, "a low surrogate \\uDC00-\\uDFFF");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    append_utf8(out, cp);
  }

  // Copies one well-formed UTF-8 sequence (shortest form, no surrogates, <= U+10FFFF).
  void copy_utf8(std::string& out) {
    const size_t start = pos_;
    const auto byte = [&](size_t i) -> unsigned {
      return i < text_.size() ? static_cast<unsigned char>(text_[i]) : 0u;
    };
    const unsigned b0 = byte(pos_);
    int n;
    unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (b0 >= 0xc2 && b0 <= 0xdf) {
      n = 2;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      n = 3;
      if (b0 == 0xe0) lo = 0xa0;  // no overlong forms
      if (b0 == 0xed) hi = 0x9f;  // no surrogates
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      n = 4;
      if (b0 == 0xf0) lo = 0x90;
      if (b0 == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
    } else {
      fail("valid UTF-8 in string");
    }
    for (int i = 1; i < n; ++i) {
      const unsigned b = byte(start + size_t(i));
      const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
      if (!ok) fail_at(start, "valid UTF-8 in string");
    }
    out.append(text_, start, size_t(n));
    pos_ = start + size_t(n);
  }

  std::string parse_string() {
    const size_t open = pos_;
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail_at(open, "a closing '\"' for the string starting here");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        ++pos_;
        parse_escape(out);
      } else if (c < 0x20) {
        fail("no raw control characters in a string (escape them, e.g. \\n)");
      } else if (c >= 0x80) {
        copy_utf8(out);
      } else {
        out += char(c);
        ++pos_;
      }
    }
  }

  Json parse_number() {
    const size_t start = pos_;
    const auto digit = [&] {
      return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9';
    };
    consume('-');
    if (!digit()) fail("a digit");
    if (!consume('0')) {
      while (digit()) ++pos_;
    }
    bool integer = true;
    if (consume('.')) {
      integer = false;
      if (!digit()) fail("a digit after '.'");
      while (digit()) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integer = false;
      ++pos_;
      if (!consume('+')) consume('-');
      if (!digit()) fail("a digit in the exponent");
      while (digit()) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integer) {
      int64_t i = 0;
      auto [ptr, ec] = std::from_chars(first, last, i);
      if (ec == std::errc() && ptr == last) return Json(i);
      // Too large for int64: still valid JSON, so it becomes a double (as_int() refuses it).
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(first, last, d);
    if (ec == std::errc::result_out_of_range && decimal_order(first, last) < 0) {
      return Json(first[0] == '-' ? -0.0 : 0.0);  // 1e-400: underflow is not an error
    }
    if (ec != std::errc() || ptr != last) fail_at(start, "a number within the range of a double");
    return Json(d);
  }

  // The power of ten of the leading significant digit of a grammatical JSON number; only its
  // sign is used, to tell underflow from overflow when from_chars reports out of range.
  static int64_t decimal_order(const char* p, const char* last) {
    if (*p == '-') ++p;
    int64_t int_digits = 0, leading_fraction_zeros = 0;
    bool nonzero_seen = false;
    for (; p < last && *p >= '0' && *p <= '9'; ++p) {
      if (*p != '0' || nonzero_seen) {
        nonzero_seen = true;
        ++int_digits;
      }
    }
    if (p < last && *p == '.') {
      for (++p; p < last && *p >= '0' && *p <= '9'; ++p) {
        if (!nonzero_seen && *p == '0')
          ++leading_fraction_zeros;
        else
          nonzero_seen = true;
      }
    }
    int64_t exponent = 0;
    if (p < last && (*p == 'e' || *p == 'E')) {
      ++p;
      const bool negative = *p == '-';
      if (*p == '+' || *p == '-') ++p;
      if (std::from_chars(p, last, exponent).ec != std::errc()) {
        exponent = std::numeric_limits<int64_t>::max() / 2;  // absurdly long exponent
      }
      if (negative) exponent = -exponent;
    }
    const int64_t order = int_digits > 0 ? int_digits - 1 : -(leading_fraction_zeros + 1);
    return order + exponent;
  }

  const std::string& text_;
  const std::string& origin_;
  size_t pos_ = 0;
};

Json Json::parse(const std::string& text, const std::string& origin) {
  return JsonParser(text, origin).parse_document();
}

}  // namespace loom
