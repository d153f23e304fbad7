// Vocabulary-parallel embedding and cross-entropy against the single-process float64 result on
// the whole vocabulary (every rank draws the whole table / logits and keeps its shard): the
// values, and the gradients that reach each rank's shard.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/vocab_parallel.h"

namespace loom::parallel {
namespace {

constexpr int64_t kShard = 5;  // vocabulary entries per rank

std::vector<float> draw(int64_t n, const char* what, float scale = 1.0f) {
  Tensor t = Tensor::empty({n});
  fill_normal(t, RngKey{4, "vocab_parallel_test", what}, 0, 0.0f, scale);
  return to_vector(t);
}

TEST(VocabParallel, CrossEntropyMatchesTheWholeVocabulary) {
  auto world = dist::world();
  const int64_t P = world->size(), r = world->rank(), V = kShard * P, N = 7;
  const std::vector<float> full = draw(N * V, "logits", 3.0f);
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < N; ++i) targets.push_back(i == 2 ? -100 : (i * 5 + 3) % V);
  std::vector<float> mine;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = r * kShard; v < (r + 1) * kShard; ++v) mine.push_back(full[size_t(i * V + v)]);
  Tensor shard = from_vector(mine, {N, kShard});
  shard.set_requires_grad(true);
  Tensor loss = vocab_parallel_cross_entropy(shard, from_vector(targets, {N}), world);
  backward(loss);
  const std::vector<float> grad = to_vector(shard.grad());

  // float64 over the whole vocabulary: loss = mean -log softmax[target]; its gradient is
  // (softmax - onehot) / count on each counted row.
  double want = 0;
  int64_t count = 0;
  std::vector<double> want_grad(size_t(N * kShard), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    if (targets[size_t(i)] < 0) continue;
    ++count;
    double mx = -1e300, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(full[size_t(i * V + v)]));
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(full[size_t(i * V + v)]) - mx);
    want += mx + std::log(s) - full[size_t(i * V + targets[size_t(i)])];
    for (int64_t k = 0; k < kShard; ++k) {
      const int64_t v = r * kShard + k;
      want_grad[size_t(i * kShard + k)] = std::exp(double(full[size_t(i * V + v)]) - mx) / s -
                                          (v == targets[size_t(i)] ? 1.0 : 0.0);
    }
  }
  want /= double(count);
  EXPECT_NEAR(item(loss), want, 1e-5 * std::abs(want));
  for (size_t k = 0; k < grad.size(); ++k)
    ASSERT_NEAR(grad[k], want_grad[k] / double(count), 1e-6)
        << "rank " << r << " grad[" << k << "]";
}

TEST(VocabParallel, EmbeddingMatchesTheWholeTable) {
  auto world = dist::world();
  const int64_t P = world->size(), r = world->rank(), V = kShard * P, C = 3;
  const std::vector<float> table = draw(V * C, "table");
  const std::vector<int64_t> ids = {0, V - 1, 2 % V, 2 % V, (V / 2), 1 % V};
  const int64_t n = int64_t(ids.size());
  Tensor shard = from_vector(
      std::vector<float>(table.begin() + r * kShard * C, table.begin() + (r + 1) * kShard * C),
      {kShard, C});
  shard.set_requires_grad(true);
  Tensor out = vocab_parallel_embedding(from_vector(ids, {2, 3}), shard, world);
  ASSERT_EQ(out.shape(), (Shape{2, 3, C}));
  const std::vector<float> got = to_vector(out);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(got[size_t(i * C + c)], table[size_t(ids[size_t(i)] * C + c)])
          << "id " << ids[size_t(i)];
  // Everything after the lookup runs the same on every rank: L = <w, out>, w the same too.
  const std::vector<float> w = draw(n * C, "w");
  backward(sum(mul(out, from_vector(w, {2, 3, C}))));
  std::vector<double> want(size_t(kShard * C), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[size_t(i)] - r * kShard;
    if (row < 0 || row >= kShard) continue;
    for (int64_t c = 0; c < C; ++c) want[size_t(row * C + c)] += w[size_t(i * C + c)];
  }
  const std::vector<float> grad = to_vector(shard.grad());
  for (size_t k = 0; k < grad.size(); ++k) ASSERT_NEAR(grad[k], want[k], 1e-6) << "rank " << r;
}

TEST(VocabParallel, IdsOutsideTheVocabularyAreNamed) {
  auto world = dist::world();
  Tensor shard = Tensor::empty({kShard, 2});
  try {
    vocab_parallel_embedding(from_vector(std::vector<int64_t>{kShard * world->size()}, {1}), shard,
                             world);
    ADD_FAILURE() << "an id past the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::parallel
