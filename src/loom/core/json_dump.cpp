// Printing. Strings are escaped by nlohmann. Numbers are not left to it: its doubles are not
// always the shortest form that reads back to the same bits (Grisu2 gives a 17th digit for
// about 1 double in 2000), and it spells some differently from what files written so far hold
// (0.0003 for 3e-04); std::to_chars gives the shortest form, so dump -> parse is exact.
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>

#include "loom/core/error.h"
#include "loom/core/json.h"

namespace loom {

class JsonWriter {
 public:
  JsonWriter(std::string& out, int indent) : out_(out), indent_(indent) {}

  void write(const Json& v, int depth) {
    switch (v.type()) {
      case Json::Type::Null:
        out_ += "null";
        return;
      case Json::Type::Bool:
        out_ += std::get<bool>(v.value_) ? "true" : "false";
        return;
      case Json::Type::Int:
        write_int(std::get<int64_t>(v.value_));
        return;
      case Json::Type::Double:
        write_double(v, std::get<double>(v.value_));
        return;
      case Json::Type::String:
        write_string(std::get<std::string>(v.value_));
        return;
      case Json::Type::Array:
        write_array(std::get<Json::Array>(v.value_), depth);
        return;
      case Json::Type::Object:
        write_object(v.items(), depth);
        return;
    }
  }

 private:
  void newline(int depth) {
    if (indent_ < 0) return;
    out_ += '\n';
    out_.append(size_t(indent_) * size_t(depth), ' ');
  }

  void write_int(int64_t i) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof(buf), i);
    out_.append(buf, res.ptr);
  }

  void write_double(const Json& v, double d) {
    LOOM_CHECK(std::isfinite(d)) << "json: " << v.describe() << " is " << d
                                 << ", which JSON cannot represent (store it as a string)";
    char buf[32];
    auto res = std::to_chars(buf, buf + sizeof(buf), d);
    const std::string_view text(buf, size_t(res.ptr - buf));
    out_.append(text);
    // "3" would read back as an integer; keep it a double.
    if (text.find_first_of(".e") == std::string_view::npos) out_ += ".0";
  }

  void write_string(const std::string& s) {
    // Bytes that are not UTF-8 become U+FFFD: the output stays JSON that parse() reads, and a
    // log line quoting a damaged file name cannot make the writer throw.
    out_ += nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/false,
                                   nlohmann::json::error_handler_t::replace);
  }

  void write_array(const Json::Array& a, int depth) {
    out_ += '[';
    for (size_t i = 0; i < a.size(); ++i) {
      if (i) out_ += ',';
      newline(depth + 1);
      write(a[i], depth + 1);
    }
    if (!a.empty()) newline(depth);
    out_ += ']';
  }

  void write_object(const std::vector<Json::Member>& members, int depth) {
    out_ += '{';
    for (size_t i = 0; i < members.size(); ++i) {
      if (i) out_ += ',';
      newline(depth + 1);
      write_string(members[i].first);
      out_ += indent_ < 0 ? ":" : ": ";
      write(members[i].second, depth + 1);
    }
    if (!members.empty()) newline(depth);
    out_ += '}';
  }

  std::string& out_;
  int indent_;
};

std::string Json::dump(int indent) const {
  std::string out;
  JsonWriter(out, indent).write(*this, 0);
  return out;
}

}  // namespace loom
