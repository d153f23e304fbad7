// Parsing: nlohmann's strict RFC 8259 lexer and parser, driven through its SAX interface so
// the events build a loom::Json directly. What nlohmann does not check (duplicate keys, the
// nesting limit, a byte order mark, a NUL byte after the value) is checked here, and its
// errors are retold as Loom's: line and column (1-based, in bytes), what was expected there
// and what came instead, because these files are edited by hand and read after crashes.
#include <cctype>
#include <cstdio>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "loom/core/error.h"
#include "loom/core/json.h"

namespace loom {

namespace {

// The text as a stream buffer, so the builder can ask how far nlohmann's lexer has read: SAX
// events carry no position, and a duplicate key or too deep a bracket is found in an event.
class TextBuffer : public std::streambuf {
 public:
  explicit TextBuffer(const std::string& text) {
    char* begin = const_cast<char*>(text.data());  // setg() takes char*; the text is only read
    setg(begin, begin, begin + text.size());
  }
  size_t consumed() const { return size_t(gptr() - eback()); }
};

bool is_whitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// nlohmann's lexer messages for bad strings and numbers, and what Loom expects instead at the
// byte where the lexer stopped.
struct LexerError {
  const char* nlohmann;
  const char* expected;
};
constexpr LexerError kLexerErrors[] = {
    {"ill-formed UTF-8", "valid UTF-8 in string"},
    {"control character", "no raw control characters in a string (escape them, e.g. \\n)"},
    {"4 hex digits", "4 hex digits after \\u"},
    {"forbidden character after backslash", "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX"},
    {"digit after '-'", "a digit"},
    {"digit after '.'", "a digit after '.'"},
    {"exponent", "a digit in the exponent"},
};

}  // namespace

// The SAX handler (nlohmann calls these members by name).
class JsonBuilder {
 public:
  JsonBuilder(const std::string& text, const std::string& origin)
      : text_(text), origin_(origin), buffer_(text) {}

  Json run() {
    // nlohmann skips a UTF-8 byte order mark; RFC 8259 text has none, and 0xEF starts no value.
    if (!text_.empty() && uint8_t(text_[0]) == 0xef) fail_at(0, expected_at(0));
    nlohmann::json::sax_parse(stream_, this, nlohmann::json::input_format_t::json, /*strict=*/true,
                              /*ignore_comments=*/false);
    // nlohmann's lexer takes a NUL byte for the end of the input. Anywhere but after the
    // top-level value that is an error it reports; after it, the NUL is left for this check.
    const size_t nul = text_.find('\0');
    if (nul != std::string::npos) fail_at(nul, expected_at(nul));
    return std::move(root_);
  }

  bool null() { return value(Json()); }
  bool boolean(bool b) { return value(Json(b)); }
  bool number_integer(int64_t i) { return number(Json(i)); }
  bool number_unsigned(uint64_t u) {
    // Above int64 a literal is still a valid number: it becomes a double (as_int() refuses it).
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return number(Json(double(u)));
    return number(Json(int64_t(u)));
  }
  bool number_float(double d, const std::string&) { return number(Json(d)); }
  bool string(std::string& s) { return value(Json(std::move(s))); }
  bool binary(nlohmann::json::binary_t&) { return false; }  // never called for JSON text
  bool start_object(size_t) { return open(Json::object()); }
  bool start_array(size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& name) {
    Level& top = open_.back();
    if (top.container->contains(name)) {
      // Only whitespace and ',' lie between the previous token and this key's opening quote.
      fail_at(text_.find('"', token_end_), "no duplicate keys (key '" + name + "' repeats)");
    }
    top.key = std::move(name);
    token_end_ = buffer_.consumed();
    return true;
  }

  // `consumed` counts the bytes the lexer read, the one it stopped at included (reading past
  // the end counts as one).
  bool parse_error(size_t consumed, const std::string&, const nlohmann::json::exception& e) {
    const size_t last = consumed - 1;  // text_.size(): the end of the input
    const size_t at = bad_token_start();
    if (e.id == 406) fail_at(at, "a number within the range of a double");
    const std::string what = e.what();
    const size_t quote = what.find("; last read:");  // only lexer errors quote what they read
    // A token of a kind the grammar does not allow here, well-formed ("[1 2]") or not ("{-").
    if (quote == std::string::npos || !(wants_value(at) || (wants_key(at) && text_[at] == '"'))) {
      fail_at(at, expected_at(at));
    }
    const std::string said = what.substr(0, quote);  // without the input it quotes
    if (said.find("missing closing quote") != std::string::npos) {
      fail_at(at, "a closing '\"' for the string starting here");
    }
    if (said.find("surrogate") != std::string::npos) {
      // nlohmann stops at the last hex digit of the \uXXXX at fault, or at the byte after a '\'
      // that should start one: point at that '\'. With no '\' after a high surrogate at all,
      // it stops where the '\' should be.
      const size_t backslash = text_.rfind('\\', last - 1);
      fail_at(last - backslash <= 5 ? backslash : last,
              said.find("must follow U+D800") != std::string::npos
                  ? "a high surrogate before a low one"
                  : "a low surrogate \\uDC00-\\uDFFF");
    }
    for (const LexerError& error : kLexerErrors) {
      if (said.find(error.nlohmann) != std::string::npos) fail_at(last, error.expected);
    }
    // "invalid literal": a misspelt true, false or null, or a byte that starts no token.
    const char* word = text_[at] == 't' ? "true" : text_[at] == 'f' ? "false" : "null";
    if (text_[at] != word[0]) fail_at(at, expected_at(at));
    // Show the whole misspelt word ("got 'tru'"), not just its first letter.
    size_t end = at;
    while (end < text_.size() && end - at < 16 && std::isalnum(uint8_t(text_[end]))) ++end;
    fail_at(at, "'" + std::string(word) + "'", "'" + text_.substr(at, end - at) + "'");
  }

 private:
  // Deep enough for any file Loom writes; nlohmann's parser does not recurse, but a Json this
  // deep is destroyed and printed recursively.
  static constexpr size_t kMaxDepth = 512;

  struct Level {
    Json* container;                 // an object or array still open
    std::optional<std::string> key;  // read, with its value still to come (objects)
  };

  bool value(Json v) {
    add(std::move(v));
    token_end_ = buffer_.consumed();
    return true;
  }

  // The lexer reads the byte after a number to see it end, unless the input ends there.
  bool number(Json n) {
    add(std::move(n));
    token_end_ = stream_.eof() ? text_.size() : buffer_.consumed() - 1;
    return true;
  }

  // Stores a value where the parser is; set() and push_back() name it for error messages.
  Json& add(Json value) {
    if (open_.empty()) {
      have_root_ = true;
      return root_ = std::move(value);
    }
    Level& top = open_.back();
    if (top.container->is_array()) return top.container->push_back(std::move(value));
    Json& stored = top.container->set(*top.key, std::move(value));
    top.key.reset();
    return stored;
  }

  bool open(Json container) {
    if (open_.size() == kMaxDepth) {
      fail_at(buffer_.consumed() - 1,
              "at most " + std::to_string(kMaxDepth) + " levels of nesting");
    }
    open_.push_back({&add(std::move(container)), std::nullopt});
    token_end_ = buffer_.consumed();
    return true;
  }

  bool close() {
    open_.pop_back();
    token_end_ = buffer_.consumed();
    return true;
  }

  // Where the token that nlohmann's parser could not take starts: after the last token that
  // made an event and, where the grammar took one there, the separator after it.
  size_t bad_token_start() const {
    const size_t at = skip_whitespace(token_end_);
    const bool separator =
        !open_.empty() &&
        ((text_[at] == ':' && open_.back().key) ||
         (text_[at] == ',' && !open_.back().key && !wants_value(at) && !wants_key(at)));
    return separator ? skip_whitespace(at + 1) : at;
  }

  size_t skip_whitespace(size_t at) const {
    while (at < text_.size() && is_whitespace(text_[at])) ++at;
    return at;
  }

  // The last byte before `at` that is not whitespace ('\0' at the start): it ends the token
  // before, which tells a separator just read from a value just read.
  char byte_before(size_t at) const {
    while (at > 0 && is_whitespace(text_[at - 1])) --at;
    return at > 0 ? text_[at - 1] : '\0';
  }

  bool wants_value(size_t at) const {
    if (open_.empty()) return !have_root_;
    const char before = byte_before(at);
    return before == ':' ||
           (open_.back().container->is_array() && (before == '[' || before == ','));
  }

  bool wants_key(size_t at) const {
    const char before = byte_before(at);
    return !open_.empty() && open_.back().container->is_object() &&
           (before == '{' || before == ',');
  }

  // What the grammar allows at `at`, given the containers open there.
  std::string expected_at(size_t at) const {
    if (wants_value(at)) {
      return at < text_.size() ? "a value (object, array, string, number, true, false or null)"
                               : "a value";
    }
    if (open_.empty()) return "end of input after the top-level value";
    const Level& top = open_.back();
    if (top.container->is_array()) return "',' or ']' in array";
    if (wants_key(at))
      return byte_before(at) == '{' ? "a string key or '}'" : "a string key after ','";
    if (top.key) return "':' after key '" + *top.key + "'";
    return "',' or '}' after the value of key '" + top.container->items().back().first + "'";
  }

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

  const std::string& text_;
  const std::string& origin_;
  TextBuffer buffer_;
  std::istream stream_{&buffer_};
  Json root_;
  bool have_root_ = false;
  std::vector<Level> open_;
  size_t token_end_ = 0;  // where the last token that made an event ends
};

Json Json::parse(const std::string& text, const std::string& origin) {
  return JsonBuilder(text, origin).run();
}

}  // namespace loom
