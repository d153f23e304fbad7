// The differentiable collectives against a float64 model of what they mean. Every rank can
// draw every rank's input (they are keyed by rank), so each computes, in double precision and
// without communication, the global function L = sum over ranks r of <w_r, y_r> (y = the op's
// output on rank r) and its central finite-difference gradient with respect to its own input;
// forward outputs and autograd gradients through the real collectives must match.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/functional.h"

namespace loom::parallel {
namespace {

// A float64 tensor for the reference: shape and row-major values.
struct Ref {
  Shape shape;
  std::vector<double> v;
};

// Elements [lo, hi) along dim.
Ref slice(const Ref& x, int64_t dim, int64_t lo, int64_t hi) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  Ref out{x.shape, {}};
  out.shape[size_t(dim)] = hi - lo;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = lo; k < hi; ++k)
      for (int64_t i = 0; i < inner; ++i)
        out.v.push_back(x.v[size_t((o * x.shape[size_t(dim)] + k) * inner + i)]);
  return out;
}

Ref concat(const std::vector<Ref>& xs, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= xs[0].shape[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < xs[0].shape.size(); ++d) inner *= xs[0].shape[d];
  Ref out{xs[0].shape, {}};
  out.shape[size_t(dim)] = 0;
  for (const Ref& x : xs) out.shape[size_t(dim)] += x.shape[size_t(dim)];
  for (int64_t o = 0; o < outer; ++o)
    for (const Ref& x : xs)
      for (int64_t k = 0; k < x.shape[size_t(dim)] * inner; ++k)
        out.v.push_back(x.v[size_t(o * x.shape[size_t(dim)] * inner + k)]);
  return out;
}

Ref chunk(const Ref& x, int64_t dim, int64_t r, int64_t P) {
  const int64_t n = x.shape[size_t(dim)] / P;
  return slice(x, dim, r * n, (r + 1) * n);
}

Ref sum(const std::vector<Ref>& xs) {
  Ref out = xs[0];
  for (size_t k = 1; k < xs.size(); ++k)
    for (size_t i = 0; i < out.v.size(); ++i) out.v[i] += xs[k].v[i];
  return out;
}

Ref draw(const Shape& shape, const std::string& what, int64_t rank) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, RngKey{9, "functional_test", what + std::to_string(rank)}, 0);
  const std::vector<float> f = to_vector(t);
  return {shape, std::vector<double>(f.begin(), f.end())};
}

Tensor to_tensor(const Ref& x) {
  return from_vector(std::vector<float>(x.v.begin(), x.v.end()), x.shape);
}

struct Case {
  std::string name;
  Shape in_shape;             // per rank
  bool same_input = false;    // the op expects x equal on every rank
  bool same_weights = false;  // what follows the op runs the same on every rank
  std::function<Tensor(const Tensor&, const GroupPtr&)> op;
  // The op's output on rank r from every rank's input, in float64.
  std::function<Ref(const std::vector<Ref>&, int64_t r, int64_t P)> reference;
};

std::vector<Case> cases() {
  return {
      {"copy_to_group",
       {3, 4},
       true,
       false,
       [](auto& x, auto& g) { return copy_to_group(x, g); },
       [](auto& xs, int64_t, int64_t) { return xs[0]; }},
      {"reduce_from_group",
       {3, 4},
       false,
       true,
       [](auto& x, auto& g) { return reduce_from_group(x, g); },
       [](auto& xs, int64_t, int64_t) { return sum(xs); }},
      {"all_gather_along_1",
       {2, 3, 2},
       false,
       false,
       [](auto& x, auto& g) { return all_gather_along(x, 1, g); },
       [](auto& xs, int64_t, int64_t) { return concat(xs, 1); }},
      {"reduce_scatter_along_0",
       {12, 2},
       false,
       false,
       [](auto& x, auto& g) { return reduce_scatter_along(x, 0, g); },
       [](auto& xs, int64_t r, int64_t P) { return chunk(sum(xs), 0, r, P); }},
      {"scatter_along_2",
       {2, 3, 12},
       true,
       false,
       [](auto& x, auto& g) { return scatter_along(x, 2, g); },
       [](auto& xs, int64_t r, int64_t P) { return chunk(xs[0], 2, r, P); }},
      {"gather_along_0",
       {2, 5},
       false,
       true,
       [](auto& x, auto& g) { return gather_along(x, 0, g); },
       [](auto& xs, int64_t, int64_t) { return concat(xs, 0); }},
      {"all_to_all_2_to_1",
       {2, 3, 12},
       false,
       false,
       [](auto& x, auto& g) { return all_to_all_along(x, 2, 1, g); },
       [](auto& xs, int64_t r, int64_t P) {
         std::vector<Ref> parts;
         for (const Ref& x : xs) parts.push_back(chunk(x, 2, r, P));
         return concat(parts, 1);
       }},
      {"all_to_all_1_to_0",
       {3, 12},
       false,
       false,
       [](auto& x, auto& g) { return all_to_all_along(x, 1, 0, g); },
       [](auto& xs, int64_t r, int64_t P) {
         std::vector<Ref> parts;
         for (const Ref& x : xs) parts.push_back(chunk(x, 1, r, P));
         return concat(parts, 0);
       }},
  };
}

class Functional : public testing::TestWithParam<size_t> {};

TEST_P(Functional, ForwardAndGradientMatchFloat64) {
  const Case c = cases()[GetParam()];
  auto world = dist::world();
  const int64_t P = world->size(), r = world->rank();
  std::vector<Ref> xs;
  for (int64_t q = 0; q < P; ++q) xs.push_back(draw(c.in_shape, "x", c.same_input ? 0 : q));
  const Ref y_ref = c.reference(xs, r, P);
  std::vector<Ref> ws;
  for (int64_t q = 0; q < P; ++q) ws.push_back(draw(y_ref.shape, "w", c.same_weights ? 0 : q));

  // Loom: forward through the real collectives, then backward of <w_r, y_r>.
  Tensor x = to_tensor(xs[size_t(r)]);
  x.set_requires_grad(true);
  Tensor y = c.op(x, world);
  ASSERT_EQ(y.shape(), y_ref.shape);
  const std::vector<float> got = to_vector(y);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], y_ref.v[i], 1e-5) << c.name << " y[" << i << "]";
  backward(sum(mul(y, to_tensor(ws[size_t(r)]))));
  const std::vector<float> grad = to_vector(x.grad());

  // float64: L = sum_r <w_r, y_r> (or, when everything after the op is the same on every rank,
  // the one loss they all compute), differentiated by central differences in this rank's input
  // (in every rank's copy of it when the input is shared).
  auto loss = [&](const std::vector<Ref>& in) {
    double total = 0;
    for (int64_t q = 0; q < (c.same_weights ? 1 : P); ++q) {
      const Ref yq = c.reference(in, q, P);
      for (size_t i = 0; i < yq.v.size(); ++i) total += ws[size_t(q)].v[i] * yq.v[i];
    }
    return total;
  };
  const double h = 1e-4;
  for (size_t i = 0; i < xs[0].v.size(); ++i) {
    std::vector<Ref> plus = xs, minus = xs;
    for (int64_t q = 0; q < P; ++q)
      if (c.same_input || q == r) {
        plus[size_t(q)].v[i] += h;
        minus[size_t(q)].v[i] -= h;
      }
    const double fd = (loss(plus) - loss(minus)) / (2 * h);
    ASSERT_NEAR(grad[i], fd, 1e-4 * (1 + std::abs(fd)))
        << c.name << " dL/dx[" << i << "] on rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Functional, testing::Range<size_t>(0, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

}  // namespace
}  // namespace loom::parallel
