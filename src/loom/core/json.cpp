// The Json value: construction, typed access and equality. Parsing and printing live in
// json_parse.cpp and json_dump.cpp.
#include "loom/core/json.h"

#include <limits>

#include "loom/core/error.h"

namespace loom {

namespace {
std::string element_name(const std::string& parent, size_t index) {
  return (parent.empty() ? std::string() : parent) + "[" + std::to_string(index) + "]";
}
}  // namespace

Json::Json(Array a) : value_(std::move(a)) {
  set_name("");
}

void Json::set_name(std::string name) {
  name_ = std::move(name);
  if (!is_array()) return;  // object members are named by their own keys
  Array& elements = std::get<Array>(value_);
  for (size_t i = 0; i < elements.size(); ++i) elements[i].set_name(element_name(name_, i));
}

Json Json::object(std::initializer_list<Member> members) {
  Json out;
  out.value_ = Object{};
  for (const Member& m : members) {
    LOOM_CHECK(!out.contains(m.first)) << "json: key '" << m.first << "' given twice in object";
    out.set(m.first, m.second);
  }
  return out;
}

void Json::check_uint64(uint64_t value) {
  LOOM_CHECK(value <= uint64_t(std::numeric_limits<int64_t>::max()))
      << "json: integer " << value << " does not fit int64";
}

const char* Json::type_name(Type type) {
  switch (type) {
    case Type::Null:
      return "null";
    case Type::Bool:
      return "a boolean";
    case Type::Int:
      return "an integer";
    case Type::Double:
      return "a non-integer number";
    case Type::String:
      return "a string";
    case Type::Array:
      return "an array";
    case Type::Object:
      return "an object";
  }
  return "?";
}

std::string Json::describe() const {
  return name_.empty() ? "value" : "key '" + name_ + "'";
}

void Json::type_error(const char* expected) const {
  LOOM_FAIL() << "json: " << describe() << " is " << type_name(type()) << ", expected " << expected;
}

bool Json::as_bool() const {
  if (!is_bool()) type_error("a boolean");
  return std::get<bool>(value_);
}

int64_t Json::as_int() const {
  // A double is refused even when integral: it may already have lost digits.
  if (!is_int()) type_error("an integer");
  return std::get<int64_t>(value_);
}

double Json::as_double() const {
  if (is_int()) return double(std::get<int64_t>(value_));
  if (!is_double()) type_error("a number");
  return std::get<double>(value_);
}

const std::string& Json::as_string() const {
  if (!is_string()) type_error("a string");
  return std::get<std::string>(value_);
}

const Json::Array& Json::as_array() const {
  if (!is_array()) type_error("an array");
  return std::get<Array>(value_);
}

Json::Array& Json::as_array() {
  if (!is_array()) type_error("an array");
  return std::get<Array>(value_);
}

const Json::Object& Json::object_or_throw() const {
  if (!is_object()) type_error("an object");
  return std::get<Object>(value_);
}

const std::vector<Json::Member>& Json::items() const {
  return object_or_throw().members;
}

size_t Json::size() const {
  if (is_array()) return std::get<Array>(value_).size();
  if (is_object()) return std::get<Object>(value_).members.size();
  type_error("an array or an object");
}

const Json& Json::at(size_t index) const {
  const Array& a = as_array();
  LOOM_CHECK(index < a.size()) << "json: index " << index << " out of range for " << describe()
                               << " with " << a.size() << " elements";
  return a[index];
}

Json& Json::at(size_t index) {
  return const_cast<Json&>(static_cast<const Json&>(*this).at(index));
}

const Json* Json::find(const std::string& key) const {
  const Object& o = object_or_throw();
  auto it = o.index.find(key);
  return it == o.index.end() ? nullptr : &o.members[it->second].second;
}

bool Json::contains(const std::string& key) const {
  return find(key) != nullptr;
}

const Json& Json::at(const std::string& key) const {
  const Json* v = find(key);
  if (v == nullptr) {
    std::string have;
    for (const Member& m : items()) have += (have.empty() ? "'" : ", '") + m.first + "'";
    LOOM_FAIL() << "json: missing key '" << key << "' in " << describe()
                << (have.empty() ? " (it is empty)" : " (it has " + have + ")");
  }
  return *v;
}

Json& Json::at(const std::string& key) {
  return const_cast<Json&>(static_cast<const Json&>(*this).at(key));
}

Json& Json::set(const std::string& key, Json value) {
  if (is_null()) value_ = Object{};
  if (!is_object()) type_error("an object");
  Object& o = std::get<Object>(value_);
  value.set_name(key);
  auto it = o.index.find(key);
  if (it != o.index.end()) return o.members[it->second].second = std::move(value);
  o.index.emplace(key, o.members.size());
  o.members.emplace_back(key, std::move(value));
  return o.members.back().second;
}

Json& Json::push_back(Json value) {
  if (is_null()) value_ = Array{};
  Array& a = as_array();
  value.set_name(element_name(name_, a.size()));
  a.push_back(std::move(value));
  return a.back();
}

bool Json::operator==(const Json& other) const {
  if (type() != other.type()) return false;
  switch (type()) {
    case Type::Null:
      return true;
    case Type::Bool:
      return std::get<bool>(value_) == std::get<bool>(other.value_);
    case Type::Int:
      return std::get<int64_t>(value_) == std::get<int64_t>(other.value_);
    case Type::Double:
      return std::get<double>(value_) == std::get<double>(other.value_);
    case Type::String:
      return std::get<std::string>(value_) == std::get<std::string>(other.value_);
    case Type::Array:
      return std::get<Array>(value_) == std::get<Array>(other.value_);
    case Type::Object:
      break;
  }
  const Object& a = std::get<Object>(value_);
  if (a.members.size() != std::get<Object>(other.value_).members.size()) return false;
  for (const Member& m : a.members) {
    const Json* v = other.find(m.first);
    if (v == nullptr || !(*v == m.second)) return false;
  }
  return true;
}

}  // namespace loom
