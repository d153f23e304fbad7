// Shared by the unit tests: run fn and expect a loom::Error whose message contains every one
// of `parts`.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/core/error.h"

template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << parts[0] << "'";
  } catch (const loom::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}
