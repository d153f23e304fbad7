// One harness for every op: each op declares its cases once, and every case is checked
//   (a) forward against a float64 reference (contiguous and non-contiguous inputs),
//   (b) gradients against float64 central finite differences of that reference,
//   (c) bf16 against f32 within bf16 tolerance,
// with outputs poisoned (every allocation filled with NaN) and fresh random inputs per run.
#pragma once
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loom/ops/ops.h"
#include "reference.h"

namespace harness {

enum class Kind { Float, Positive, Index };

struct Input {
  loom::Shape shape;
  Kind kind = Kind::Float;
  bool grad = true;   // check its gradient (float inputs only)
  int64_t limit = 0;  // Index: values in [0, limit)
  std::function<std::vector<double>(int64_t n, std::mt19937&)> values;  // custom generator
};

inline Input F(loom::Shape s, bool grad = true) {
  return Input{std::move(s), Kind::Float, grad, 0, {}};
}
inline Input P(loom::Shape s) {
  return Input{std::move(s), Kind::Positive, true, 0, {}};
}
inline Input I(loom::Shape s, int64_t limit) {
  return Input{std::move(s), Kind::Index, false, limit, {}};
}

struct OpCase {
  std::string label;
  std::vector<Input> inputs;
  std::function<loom::Tensor(const std::vector<loom::Tensor>&)> run;
  std::function<ref::R(const std::vector<ref::R>&)> reference;
  double forward_tol = 1e-4;  // max |loom - ref| / max |ref|, f32
  double grad_tol = 2e-3;     // max |loom grad - finite difference| / max |finite difference|
  double bf16_tol = 3e-2;     // max |bf16 - f32| / max |f32|, outputs and gradients
  bool check_bf16 = true;
};

// op name -> cases. An op registered with no case makes the harness fail.
std::map<std::string, std::vector<OpCase>>& registry();
void register_op(const std::string& op, std::vector<OpCase> cases);

// Registers every op's cases (op_cases.cpp), once.
void register_all_cases();

// Runs every check on every case of `op`, with the op's inputs on `device`; failures are
// reported through gtest.
void check_op(const std::string& op, loom::Device device = loom::cpu_device());

}  // namespace harness
