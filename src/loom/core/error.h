// loom::Error and LOOM_CHECK: library code throws errors the user can act on, never exits.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what), message_(what) {}
  // A failed check: what() is the message and then where (the condition, file and line).
  Error(const std::string& message, const std::string& where)
      : std::runtime_error(where.empty() ? message : message + " [" + where + "]"),
        message_(message),
        where_(where) {}
  // What a user reads: the message alone (the command line shows where only with --debug).
  const std::string& message() const { return message_; }
  const std::string& where() const { return where_; }  // "" when not from a check

 private:
  std::string message_, where_;
};

namespace detail {
// Collects the message of a failed check and throws it when the statement ends.
class CheckFailure {
 public:
  CheckFailure(const char* cond, const char* file, int line)
      : cond_(cond), file_(file), line_(line) {}
  // Throws the message (what the user reads) and where the check sits.
  [[noreturn]] ~CheckFailure() noexcept(false) {
    throw Error(stream_.str(), std::string(cond_ ? cond_ : "error") + " at " + file_ + ":" +
                                   std::to_string(line_));
  }
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  // Shapes and index lists print as (2, 3, 4).
  CheckFailure& operator<<(const std::vector<int64_t>& values) {
    stream_ << "(";
    for (size_t i = 0; i < values.size(); ++i) stream_ << (i ? ", " : "") << values[i];
    stream_ << ")";
    return *this;
  }

 private:
  std::ostringstream stream_;
  const char* cond_;
  const char* file_;
  int line_;
};
}  // namespace detail

}  // namespace loom

// Usage: LOOM_CHECK(a.dim() == 2) << "matmul: expected a 2-D tensor, got " << a.shape();
#define LOOM_CHECK(cond) \
  if (cond) {            \
  } else                 \
    ::loom::detail::CheckFailure(#cond, __FILE__, __LINE__)

// For errors without a condition (unreachable switch arms, bad enum values).
#define LOOM_FAIL() ::loom::detail::CheckFailure(nullptr, __FILE__, __LINE__)
