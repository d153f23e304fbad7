// Every op's cases (op_cases.cpp) through the harness on the CPU backend.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "op_harness.h"

namespace {

// The op set the foundation issue lists; each must have cases here.
const char* kRequiredOps[] = {
    "matmul",       "linear",
    "add",          "sub",
    "mul",          "div",
    "neg",          "add_scalar",
    "mul_scalar",   "exp",
    "log",          "sqrt",
    "rsqrt",        "tanh",
    "pow",          "relu",
    "sum",          "mean",
    "max",          "reshape",
    "permute",      "transpose",
    "narrow",       "expand",
    "contiguous",   "cat",
    "split",        "stack",
    "index_select", "gather",
    "scatter_add",  "embedding",
    "layer_norm",   "rms_norm",
    "gelu",         "silu",
    "swiglu",       "softmax",
    "log_softmax",  "cross_entropy",
    "mse",          "rope",
    "modulate",     "attention",
    "conv2d",       "grouped_linear",
    "index_add",    "sigmoid",
};

class OpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OpTest, ForwardGradientAndBf16) {
  harness::check_op(GetParam());
}

std::vector<std::string> registered_ops() {
  harness::register_all_cases();
  std::vector<std::string> names;
  for (auto& [name, cases] : harness::registry()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, ::testing::ValuesIn(registered_ops()),
                         [](const auto& info) { return info.param; });

TEST(OpHarness, EveryListedOpHasCases) {
  harness::register_all_cases();
  for (const char* op : kRequiredOps) {
    auto it = harness::registry().find(op);
    EXPECT_TRUE(it != harness::registry().end()) << "op " << op << " has no cases";
    if (it != harness::registry().end()) EXPECT_FALSE(it->second.empty()) << op;
  }
  for (auto& [name, cases] : harness::registry())
    EXPECT_FALSE(cases.empty()) << "op " << name << " registered without cases";
}

TEST(OpHarness, FailsForAnOpWithoutCases) {
  harness::register_op("__empty_for_test", {});
  EXPECT_FATAL_FAILURE(harness::check_op("__empty_for_test"), "registered without cases");
  harness::registry().erase("__empty_for_test");
}

}  // namespace
