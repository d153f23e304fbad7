#include "loom/train/config_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "loom/core/error.h"
#include "loom/train/config_keys.h"

namespace loom::train {

struct ConfigFile::Impl {
  toml::table table;
  std::set<std::string> used;                                          // "section.key"
  std::vector<Read> reads;                                             // the first of each
  std::map<std::string, std::map<std::string, std::string>> resolved;  // for the run directory

  // Marks section.key used; its first read is recorded with its type and fallback.
  void note(const std::string& section, const std::string& key, const char* type,
            const std::string& fallback) {
    if (used.insert(section + "." + key).second) reads.push_back({section, key, type, fallback});
  }
};

namespace {

std::string quote(const std::string& s) {
  std::ostringstream os;
  os << toml::value<std::string>(s);
  return os.str();
}

// The shortest text that reads back as v, as a TOML float (0.05, not 0.050000000000000003).
std::string number_text(double v) {
  if (!std::isfinite(v)) {
    std::ostringstream os;
    os << toml::value<double>(v);
    return os.str();
  }
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string text = buf;
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// A list as TOML text.
template <typename T>
std::string list_text(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    out += i ? ", " : "";
    if constexpr (std::is_same_v<T, std::string>)
      out += quote(v[i]);
    else if constexpr (std::is_same_v<T, double>)
      out += number_text(v[i]);
    else
      out += std::to_string(v[i]);
  }
  return out + "]";
}

// Parses the right-hand side of an override as a TOML value; a bare word becomes a string.
toml::table parse_value(const std::string& text) {
  try {
    return toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    return toml::parse("v = " + quote(text));
  }
}

}  // namespace

ConfigFile::ConfigFile(const std::string& path, const std::vector<std::string>& overrides)
    : impl_(std::make_unique<Impl>()), path_(path) {
  // A directory or a device is no config (toml++ would read it as {}).
  std::error_code ec;
  LOOM_CHECK(!std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec))
      << "config " << path << " is not a regular file";
  try {
    impl_->table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    LOOM_FAIL() << "config " << path << ":" << where.line << ":" << where.column << ": "
                << e.description();
  }
  // Nothing but blanks and comments would train every default, which no one asked for.
  LOOM_CHECK(!impl_->table.empty()) << "config " << path << " is empty (no settings in it)";
  for (const std::string& o : overrides) {
    const size_t eq = o.find('='), dot = o.find('.');
    LOOM_CHECK(eq != std::string::npos && dot != std::string::npos && dot < eq)
        << "--set " << o << ": expected section.key=value";
    const std::string section = o.substr(0, dot), key = o.substr(dot + 1, eq - dot - 1);
    toml::table value = parse_value(o.substr(eq + 1));
    if (!impl_->table.contains(section)) impl_->table.insert(section, toml::table{});
    toml::table* t = impl_->table[section].as_table();
    LOOM_CHECK(t) << "--set " << o << ": '" << section << "' is not a section";
    t->insert_or_assign(key, *value.get("v"));
  }
  for (auto&& [k, v] : impl_->table)
    LOOM_CHECK(v.is_table()) << "config " << path << ": top-level key '" << k.str()
                             << "' must be a [section]";
}

ConfigFile::~ConfigFile() = default;
ConfigFile::ConfigFile(ConfigFile&&) noexcept = default;

bool ConfigFile::has(const std::string& section, const std::string& key) const {
  const toml::table* t = impl_->table[section].as_table();
  return t && t->contains(key);
}

namespace {
const toml::node* find(const toml::table& table, const std::string& section,
                       const std::string& key) {
  const toml::table* t = table[section].as_table();
  return t ? t->get(key) : nullptr;
}
}  // namespace

std::string ConfigFile::get_string(const std::string& section, const std::string& key,
                                   const std::string& fallback) {
  impl_->note(section, key, "string", quote(fallback));
  const toml::node* n = find(impl_->table, section, key);
  std::string v = fallback;
  if (n) {
    LOOM_CHECK(n->is_string()) << "config " << path_ << ": " << section << "." << key
                               << " must be a string";
    v = **n->as_string();
  }
  impl_->resolved[section][key] = quote(v);
  return v;
}

int64_t ConfigFile::get_int(const std::string& section, const std::string& key, int64_t fallback,
                            int64_t max) {
  impl_->note(section, key, "integer", std::to_string(fallback));
  const toml::node* n = find(impl_->table, section, key);
  int64_t v = fallback;
  if (n) {
    LOOM_CHECK(n->is_integer()) << "config " << path_ << ": " << section << "." << key
                                << " must be an integer";
    v = **n->as_integer();
    LOOM_CHECK(v <= max) << "config " << path_ << ": " << section << "." << key
                         << " must be at most " << max << ", got " << v;
  }
  impl_->resolved[section][key] = std::to_string(v);
  return v;
}

double ConfigFile::get_double(const std::string& section, const std::string& key, double fallback) {
  impl_->note(section, key, "number", number_text(fallback));
  const toml::node* n = find(impl_->table, section, key);
  double v = fallback;
  if (n) {
    LOOM_CHECK(n->is_number()) << "config " << path_ << ": " << section << "." << key
                               << " must be a number";
    v = n->is_integer() ? double(**n->as_integer()) : **n->as_floating_point();
    LOOM_CHECK(std::isfinite(v)) << "config " << path_ << ": " << section << "." << key
                                 << " must be a finite number, got " << v;
  }
  impl_->resolved[section][key] = number_text(v);
  return v;
}

void ConfigFile::record(const std::string& section, const std::string& key,
                        const std::string& value) {
  impl_->resolved[section][key] = quote(value);
}

bool ConfigFile::get_bool(const std::string& section, const std::string& key, bool fallback) {
  impl_->note(section, key, "boolean", fallback ? "true" : "false");
  const toml::node* n = find(impl_->table, section, key);
  bool v = fallback;
  if (n) {
    LOOM_CHECK(n->is_boolean()) << "config " << path_ << ": " << section << "." << key
                                << " must be true or false";
    v = **n->as_boolean();
  }
  impl_->resolved[section][key] = v ? "true" : "false";
  return v;
}

namespace {
// An array of one TOML type as values (integers also read as doubles), and its TOML text.
template <typename T>
std::vector<T> read_list(const toml::node* n, const std::string& name, const char* type,
                         const std::vector<T>& fallback, std::string& text) {
  std::vector<T> v = fallback;
  if (n) {
    const toml::array* a = n->as_array();
    LOOM_CHECK(a) << name << " must be an array of " << type;
    v.clear();
    for (const toml::node& e : *a) {
      std::optional<T> x;
      if constexpr (std::is_same_v<T, double>)
        x = e.is_integer() ? std::optional<double>(double(**e.as_integer()))
                           : e.value_exact<double>();
      else
        x = e.value_exact<T>();
      LOOM_CHECK(x.has_value()) << name << " must be an array of " << type;
      v.push_back(*x);
    }
  }
  text = list_text(v);
  return v;
}
}  // namespace

std::vector<int64_t> ConfigFile::get_int_list(const std::string& section, const std::string& key,
                                              const std::vector<int64_t>& fallback) {
  impl_->note(section, key, "integer list", list_text(fallback));
  return read_list(find(impl_->table, section, key), "config " + path_ + ": " + section + "." + key,
                   "integers", fallback, impl_->resolved[section][key]);
}

std::vector<double> ConfigFile::get_double_list(const std::string& section, const std::string& key,
                                                const std::vector<double>& fallback) {
  impl_->note(section, key, "number list", list_text(fallback));
  return read_list(find(impl_->table, section, key), "config " + path_ + ": " + section + "." + key,
                   "numbers", fallback, impl_->resolved[section][key]);
}

std::vector<std::string> ConfigFile::get_string_list(const std::string& section,
                                                     const std::string& key,
                                                     const std::vector<std::string>& fallback) {
  impl_->note(section, key, "string list", list_text(fallback));
  return read_list(find(impl_->table, section, key), "config " + path_ + ": " + section + "." + key,
                   "strings", fallback, impl_->resolved[section][key]);
}

std::string closest_word(const std::string& word, const std::vector<std::string>& known) {
  // Levenshtein distance, one row at a time.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 4) + 1;
  for (const std::string& k : known)
    if (const size_t d = distance(word, k); d < best_distance) best = k, best_distance = d;
  return best;
}

void ConfigFile::check_all_keys_used() const {
  std::vector<std::string> unknown;
  for (auto&& [section, node] : impl_->table)
    for (auto&& [key, value] : *node.as_table()) {
      const std::string name = std::string(section.str()) + "." + std::string(key.str());
      if (!impl_->used.count(name)) unknown.push_back(name);
    }
  if (unknown.empty()) return;
  std::vector<std::string> known = config_key_names();
  known.insert(known.end(), impl_->used.begin(), impl_->used.end());
  std::ostringstream os;
  for (size_t i = 0; i < unknown.size(); ++i) {
    os << (i ? ", " : "") << unknown[i];
    if (const std::string why = config_key_unused_reason(unknown[i]); !why.empty())
      os << " (not used by this config: " << why << ")";
    else if (const std::string near = closest_word(unknown[i], known); !near.empty())
      os << " (did you mean " << near << "?)";
  }
  LOOM_FAIL() << "config " << path_ << ": unknown key" << (unknown.size() > 1 ? "s " : " ")
              << os.str();
}

const std::vector<ConfigFile::Read>& ConfigFile::reads() const {
  return impl_->reads;
}

std::string ConfigFile::resolved() const {
  std::ostringstream os;
  for (const auto& [section, keys] : impl_->resolved) {
    os << "[" << section << "]\n";
    for (const auto& [k, v] : keys) os << k << " = " << v << "\n";
    os << "\n";
  }
  return os.str();
}

}  // namespace loom::train
