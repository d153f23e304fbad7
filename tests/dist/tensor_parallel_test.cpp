// A tensor-parallel MLP (column-parallel fc1, GELU, row-parallel fc2) on P ranks equals the
// same MLP on one process: output, and the gradients of the input and of each rank's weight
// shards. With and without sequence parallelism. Every rank computes the one-process MLP
// itself from the whole weights.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/tensor_parallel.h"

namespace loom::parallel {
namespace {

Tensor draw(const Shape& shape, const char* what) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, RngKey{8, "tensor_parallel_test", what}, 0, 0.0f, 0.5f);
  t.set_requires_grad(true);
  return t;
}

Tensor leaf(const Tensor& t) {
  Tensor c = contiguous(t.detach()).detach();
  c.set_requires_grad(true);
  return c;
}

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<float> g = to_vector(got), w = to_vector(contiguous(want.detach()));
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], 1e-5 * (1 + std::abs(w[i]))) << what << "[" << i << "]";
}

class TensorParallelMlp : public testing::TestWithParam<bool> {};  // sequence parallel

TEST_P(TensorParallelMlp, EqualsTheOneProcessMlp) {
  const bool sp = GetParam();
  auto world = dist::world();
  const int64_t P = world->size(), r = world->rank(), B = 2, T = 12, C = 6, H = 24;
  Tensor x = draw({B, T, C}, "x"), w1 = draw({H, C}, "w1"), b1 = draw({H}, "b1"),
         w2 = draw({C, H}, "w2"), b2 = draw({C}, "b2"), g = draw({B, T, C}, "g");
  Tensor full = linear(gelu(linear(x, w1, b1)), w2, b2);
  backward(sum(mul(full, g.detach())));

  // This rank: rows of fc1 (and its bias), columns of fc2; x whole or its sequence chunk.
  const int64_t h = H / P, t = T / P;
  Tensor w1r = leaf(narrow(w1, 0, r * h, h)), b1r = leaf(narrow(b1, 0, r * h, h)),
         w2r = leaf(narrow(w2, 1, r * h, h)), b2r = leaf(b2);
  Tensor xr = leaf(sp ? narrow(x, 1, r * t, t) : x);
  Tensor out = row_parallel_linear(gelu(column_parallel_linear(xr, w1r, b1r, world, sp ? 1 : -1)),
                                   w2r, b2r, world, sp ? 1 : -1);
  const Tensor want = sp ? narrow(full, 1, r * t, t) : full;
  expect_near(out, want, "out");
  // What follows the MLP: the same on every rank (replicated), or each rank's own tokens.
  backward(sum(mul(out, contiguous(sp ? narrow(g.detach(), 1, r * t, t) : g.detach()))));
  expect_near(xr.grad(), sp ? narrow(x.grad(), 1, r * t, t) : x.grad(), "dx");
  expect_near(w1r.grad(), narrow(w1.grad(), 0, r * h, h), "dw1");
  expect_near(b1r.grad(), narrow(b1.grad(), 0, r * h, h), "db1");
  expect_near(w2r.grad(), narrow(w2.grad(), 1, r * h, h), "dw2");
  // The whole bias of fc2: every rank's gradient is its tokens' part (sequence parallel) or
  // the whole (replicated); summed over ranks under SP.
  Tensor db2 = b2r.grad();
  if (sp) {
    NoGradGuard no_grad;
    world->all_reduce(db2, dist::ReduceOp::Sum)->wait();
  }
  expect_near(db2, b2.grad(), "db2");
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TensorParallelMlp, testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "sequence_parallel" : "replicated";
                         });

}  // namespace
}  // namespace loom::parallel
