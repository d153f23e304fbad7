// Ulysses attention on P ranks equals attention over the whole sequence on one: each rank
// computes the whole-sequence attention itself (every rank can draw the full q, k, v) and
// compares its chunk of the output and of the gradients of L = sum over ranks <w_r, out_r>.
// Causal and bidirectional, with and without grouped-query heads.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/context_parallel.h"

namespace loom::parallel {
namespace {

Tensor draw(const Shape& shape, const char* what) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, RngKey{6, "context_parallel_test", what}, 0);
  return t;
}

// This rank's sequence chunk (dim 2), as a fresh leaf.
Tensor chunk_of(const Tensor& full, int64_t r, int64_t P) {
  const int64_t n = full.size(2) / P;
  Tensor c = contiguous(narrow(full.detach(), 2, r * n, n)).detach();
  c.set_requires_grad(true);
  return c;
}

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<float> g = to_vector(got), w = to_vector(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], 2e-5 * (1 + std::abs(w[i]))) << what << "[" << i << "]";
}

struct UlyssesCase {
  int64_t heads, kv_heads;
  bool causal;
};

class Ulysses : public testing::TestWithParam<UlyssesCase> {};

TEST_P(Ulysses, EqualsAttentionOverTheWholeSequence) {
  const UlyssesCase c = GetParam();
  auto world = dist::world();
  const int64_t P = world->size(), r = world->rank(), B = 2, T = 24, D = 8;
  ASSERT_TRUE(c.heads % P == 0 && c.kv_heads % P == 0) << "the cases are for 1-4 ranks";
  Tensor q = draw({B, c.heads, T, D}, "q"), k = draw({B, c.kv_heads, T, D}, "k"),
         v = draw({B, c.kv_heads, T, D}, "v"), w = draw({B, c.heads, T, D}, "w");
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  // One process, the whole sequence: L = <w, out>.
  Tensor full = scaled_dot_product_attention(q, k, v, Tensor(), c.causal);
  backward(sum(mul(full, w)));
  // P ranks, one chunk each.
  Tensor ql = chunk_of(q, r, P), kl = chunk_of(k, r, P), vl = chunk_of(v, r, P);
  Tensor out = ulysses_attention(ql, kl, vl, c.causal, world);
  const int64_t n = T / P;
  expect_near(out, narrow(full.detach(), 2, r * n, n), "out");
  backward(sum(mul(out, contiguous(narrow(w, 2, r * n, n)))));
  expect_near(ql.grad(), narrow(q.grad(), 2, r * n, n), "dq");
  expect_near(kl.grad(), narrow(k.grad(), 2, r * n, n), "dk");
  expect_near(vl.grad(), narrow(v.grad(), 2, r * n, n), "dv");
}

INSTANTIATE_TEST_SUITE_P(Layouts, Ulysses,
                         testing::Values(UlyssesCase{12, 12, true}, UlyssesCase{12, 12, false},
                                         UlyssesCase{24, 12, true}),
                         [](const auto& info) {
                           return "h" + std::to_string(info.param.heads) + "_kv" +
                                  std::to_string(info.param.kv_heads) +
                                  (info.param.causal ? "_causal" : "_full");
                         });

}  // namespace
}  // namespace loom::parallel
