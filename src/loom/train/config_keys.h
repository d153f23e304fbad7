// The config reference: every key `loom train` reads, with its type, default, allowed values,
// the model kinds and condition under which it is read, and one line of meaning. One table is
// the source of `loom config keys`, docs/config.md and the unknown-key messages; a test holds it
// against what read_config actually reads (key, type and default, for every model kind).
#pragma once
#include <string>
#include <vector>

namespace loom::train {

struct ConfigKey {
  const char* name;      // "section.key"
  const char* kinds;     // the model kinds that read it, space-separated; "" every kind
  const char* type;      // integer, number, boolean, string, integer list, number list, ...
  const char* fallback;  // the default as TOML text; "(...)": computed from other keys
  const char* allowed;   // "" any value of the type (within the checks its meaning names)
  const char* when;      // "" always read (for its kinds), else the condition
  const char* meaning;
};

const std::vector<ConfigKey>& config_keys();

// The rows of `section` ("" all), as aligned text for a terminal; empty if there are none.
std::string config_keys_text(const std::string& section);
// docs/config.md, whole.
std::string config_keys_markdown();
// Why `name` (section.key) is not read by a config: the reference's kinds and condition for
// it, or "" if the reference does not know it.
std::string config_key_unused_reason(const std::string& name);
// Every key's name, once each.
std::vector<std::string> config_key_names();

}  // namespace loom::train
