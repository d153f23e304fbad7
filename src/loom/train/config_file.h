// Reading a TOML config into typed values: every key must be read by someone, so a typo is
// an error naming the key; every value must have the expected type and range.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace loom::train {

class ConfigFile {
 public:
  // Parses `path` and applies overrides "section.key=value" (value in TOML syntax; bare
  // words are taken as strings). Errors name the file, line and key.
  ConfigFile(const std::string& path, const std::vector<std::string>& overrides);
  ~ConfigFile();
  ConfigFile(ConfigFile&&) noexcept;

  bool has(const std::string& section, const std::string& key) const;
  std::string get_string(const std::string& section, const std::string& key,
                         const std::string& fallback);
  // Every count a user can set is bounded: by kMaxCount unless the key gives its own `max`
  // (train.steps may be larger; train.grad_accum, the micro-batches of one step, smaller).
  static constexpr int64_t kMaxCount = (int64_t(1) << 31) - 1;
  int64_t get_int(const std::string& section, const std::string& key, int64_t fallback,
                  int64_t max = kMaxCount);
  double get_double(const std::string& section, const std::string& key, double fallback);
  bool get_bool(const std::string& section, const std::string& key, bool fallback);
  std::vector<int64_t> get_int_list(const std::string& section, const std::string& key,
                                    const std::vector<int64_t>& fallback);
  std::vector<double> get_double_list(const std::string& section, const std::string& key,
                                      const std::vector<double>& fallback);
  std::vector<std::string> get_string_list(const std::string& section, const std::string& key,
                                           const std::vector<std::string>& fallback);
  // Records what a key resolved to in place of what it said (train.precision "auto" -> "bf16");
  // `value` is a string.
  void record(const std::string& section, const std::string& key, const std::string& value);
  // Throws naming every key that no getter asked for: a key of the reference (config_keys.h)
  // that this config does not use says when it is used, any other gets a did-you-mean.
  void check_all_keys_used() const;
  // Every key a getter asked for, in order, with its type and the value it falls back to (TOML
  // text): what the config reference is checked against.
  struct Read {
    std::string section, key, type, fallback;
  };
  const std::vector<Read>& reads() const;
  // The resolved config as TOML text (all values read, defaults included).
  std::string resolved() const;
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

// The word of `known` nearest to `word` by edit distance, if near enough to be a typo of it
// (at most max(2, len / 4) edits), else "": for did-you-mean hints.
std::string closest_word(const std::string& word, const std::vector<std::string>& known);

}  // namespace loom::train
