// What the readers of config sections share (train/config.cpp and each model kind's spec):
// bounds, enum-valued keys and the [moe] section.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "loom/nn/moe.h"
#include "loom/train/config_file.h"

namespace loom::train {

// Step numbers, cadences in steps, seeds and the batch (bounded by memory instead): no bound of
// their own beyond int64 (ConfigFile::kMaxCount bounds every other count).
constexpr int64_t kAnyStep = std::numeric_limits<int64_t>::max();

// A key whose value names one of an enum's values: parsed here, once; `parse` fails naming
// the key and the known values.
template <typename Parse>
auto choice(ConfigFile& f, const char* section, const char* key, const char* fallback,
            Parse parse) {
  return parse(f.get_string(section, key, fallback),
               "config " + f.path() + ": " + section + "." + key);
}

// [moe]: a mixture of experts in place of the MLP. Without moe.experts every other key of the
// section is an unknown key.
void read_moe(ConfigFile& f, nn::MoeConfig& m);

}  // namespace loom::train
