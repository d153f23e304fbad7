#include "numbers.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

CLI::Option* add_int(CLI::App& cmd, const std::string& name, int64_t& value,
                     const std::string& help, int64_t min, int64_t max) {
  const std::string what = min == 1   ? "a positive integer"
                           : min == 0 ? "a non-negative integer"
                                      : "an integer";
  const auto read = [min, max, what](std::string& text) -> std::string {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != 0 || v < min) return "'" + text + "' is not " + what;
    if (v > max || errno == ERANGE)
      return "'" + text + "' is more than " + std::to_string(max);
    text = std::to_string(v);  // the plain decimal, for CLI11 to read
    return "";
  };
  return cmd.add_option(name, value, help)->transform(CLI::Validator(read, ""))->type_name("N");
}

CLI::Option* add_number(CLI::App& cmd, const std::string& name, double& value,
                        const std::string& help, bool positive) {
  const auto read = [positive](std::string& text) -> std::string {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == 0 && std::isfinite(v) && (!positive || v > 0)) return "";
    return "'" + text + (positive ? "' is not a positive number" : "' is not a finite number");
  };
  return cmd.add_option(name, value, help)->check(CLI::Validator(read, ""))->type_name("S");
}
