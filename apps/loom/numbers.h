// The command line's numbers, read as Loom has always read them (strtoll in base 10 -- CLI11
// alone would read "010" as 8 -- and strtod) and refused in its words: "--steps: 'x' is not an
// integer". Every count is bounded (at most 2^31 - 1, as in a config: ConfigFile::kMaxCount)
// and every number finite: a count of 10^12 or a NaN guidance scale is a typo, never a request.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "loom/train/config_file.h"

CLI::Option* add_int(CLI::App& cmd, const std::string& name, int64_t& value,
                     const std::string& help, int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = loom::train::ConfigFile::kMaxCount);
CLI::Option* add_number(CLI::App& cmd, const std::string& name, double& value,
                        const std::string& help, bool positive = false);
