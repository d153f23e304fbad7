// A small JSON value for checkpoint manifests, trainer state, metrics.jsonl and safetensors
// headers. Integers are kept as exact int64 (steps, RNG counters and byte offsets must never
// pass through a double); object keys keep their insertion order so files diff cleanly.
//
// Rules worth knowing:
//  - parse() is strict RFC 8259: no comments, no trailing commas, no duplicate keys, valid
//    UTF-8 only, nesting at most 512 deep. Errors give line:column and what was expected.
//  - A number literal without fraction or exponent that fits int64 parses as an integer;
//    anything else (1.0, 1e3, 2^64) parses as a double. as_int() never converts a double.
//  - dump() prints doubles in the shortest form that reads back to the same bits, always
//    with a '.' or exponent so they stay doubles. Non-finite doubles (NaN, Inf) have no JSON
//    spelling: dump() throws rather than silently writing null; store them as strings.
//  - Type errors name the key: at("step").as_int() on a string throws
//    "json: key 'step' is a string, expected an integer". Every value remembers the key (or
//    "parent[i]" for array elements) it was last stored under, for these messages only;
//    the name takes no part in equality.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace loom {

class Json {
 public:
  enum class Type : uint8_t { Null, Bool, Int, Double, String, Array, Object };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  // Every integer type except bool becomes an exact int64 (a uint64 above 2^63-1 throws).
  template <typename I,
            std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Json(I i) : value_(to_int64(i)) {}
  Json(double d) : value_(d) {}
  Json(float f) : value_(double(f)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(Array a);

  static Json array(Array elements = {}) { return Json(std::move(elements)); }
  // Json::object({{"step", 10}, {"lr", 3e-4}}); a repeated key throws.
  static Json object(std::initializer_list<Member> members = {});

  // `origin` (a file name, say) prefixes error messages: "json: 'state.json', line 3, ...".
  static Json parse(const std::string& text, const std::string& origin = "");
  // indent < 0: compact, one line. indent >= 0: one member per line, indented that much.
  std::string dump(int indent = -1) const;

  Type type() const { return Type(value_.index()); }
  static const char* type_name(Type type);  // "a string", "an integer", ... (for messages)
  bool is_null() const { return type() == Type::Null; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_double() const { return type() == Type::Double; }
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return type() == Type::String; }
  bool is_array() const { return type() == Type::Array; }
  bool is_object() const { return type() == Type::Object; }

  // Typed reads; each throws naming this value's key and the type it has.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;  // an integer converts; a double is returned as is
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const std::vector<Member>& items() const;  // object members in insertion order

  // Containers. size() is the element or member count; scalars throw.
  size_t size() const;
  const Json& at(size_t index) const;  // arrays; throws naming the index and the size
  Json& at(size_t index);
  const Json& at(const std::string& key) const;  // objects; throws naming the missing key
  Json& at(const std::string& key);
  bool contains(const std::string& key) const;
  const Json* find(const std::string& key) const;  // nullptr when absent
  // Sets key (replacing an existing value in place, keeping its position). Null becomes {}.
  Json& set(const std::string& key, Json value);
  // Appends to an array. Null becomes [].
  Json& push_back(Json value);

  // Structural equality; object member order does not matter, names do not take part.
  bool operator==(const Json& other) const;
  bool operator!=(const Json& other) const { return !(*this == other); }

 private:
  struct Object {
    std::vector<Member> members;
    std::unordered_map<std::string, size_t> index;  // key -> position in members
  };
  template <typename I>
  static int64_t to_int64(I i) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(int64_t)) check_uint64(i);
    return int64_t(i);
  }
  static void check_uint64(uint64_t value);
  [[noreturn]] void type_error(const char* expected) const;
  std::string describe() const;     // "key 'step'" or "value"
  void set_name(std::string name);  // also renames array elements "name[i]"
  const Object& object_or_throw() const;
  friend class JsonWriter;

  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> value_;
  std::string name_;  // for error messages only
};

}  // namespace loom
