// DDP against the single-process gradient of the whole global batch, which every rank
// computes for itself on its own copy of the parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/ddp.h"

namespace loom::parallel {
namespace {

struct Params {
  std::vector<nn::NamedParameter> named;
  Tensor w1, b1, w2, unused;
};

Params make_params() {
  Params p;
  p.w1 = Tensor::empty({6, 8});
  p.b1 = Tensor::empty({8});
  p.w2 = Tensor::empty({8, 6});
  p.unused = Tensor::empty({5});
  int k = 0;
  for (Tensor* t : {&p.w1, &p.b1, &p.w2, &p.unused}) {
    fill_normal(*t, RngKey{3, "ddp_test", std::to_string(k++)}, 0, 0.0f, 0.5f);
    t->set_requires_grad(true);
  }
  p.named = {
      {"w1", p.w1, true}, {"b1", p.b1, false}, {"w2", p.w2, true}, {"unused", p.unused, true}};
  return p;
}

// Rows [first, first + n) of the global batch.
Tensor inputs(int64_t first, int64_t n) {
  Tensor x = Tensor::empty({n, 6});
  fill_normal(x, RngKey{4, "ddp_test", "x"}, first * 6);
  return x;
}

// mean over rows of sum(tanh(x w1 + b1) w2 * (x w1)[:, :6]): w1 is used twice, so its gradient
// is accumulated twice in one backward.
Tensor loss_of(const Params& p, const Tensor& x) {
  Tensor h = matmul(x, p.w1);
  Tensor y = matmul(tanh(add(h, p.b1)), p.w2);
  return mean(sum(mul(y, narrow(h, 1, 0, 6)), {1}));
}

void expect_same_grads(const Params& got, const Params& want, const std::string& what) {
  for (size_t i = 0; i < got.named.size(); ++i) {
    Tensor g = got.named[i].tensor.grad(), r = want.named[i].tensor.grad();
    std::vector<float> gv = to_vector(g);
    std::vector<float> rv = r.defined() ? to_vector(r) : std::vector<float>(gv.size(), 0.0f);
    ASSERT_EQ(gv.size(), rv.size());
    for (size_t k = 0; k < gv.size(); ++k)
      ASSERT_NEAR(gv[k], rv[k], 1e-5 * (1 + std::abs(rv[k])))
          << what << " " << got.named[i].name << "[" << k << "]";
  }
}

class DdpTest : public testing::TestWithParam<int64_t> {};  // bucket bytes

TEST_P(DdpTest, AveragedGradientsEqualTheGlobalBatchGradient) {
  auto w = dist::world();
  const int64_t P = w->size(), b = 3;
  Params mine = make_params(), ref = make_params();
  DistributedDataParallel ddp(mine.named, w, GetParam());
  ddp.broadcast_parameters();
  for (int step = 0; step < 2; ++step) {  // twice: the bucket state resets between steps
    backward(loss_of(mine, inputs(w->rank() * b, b)));
    ddp.finish_gradient_sync();
    backward(loss_of(ref, inputs(0, P * b)));
    expect_same_grads(mine, ref, "step " + std::to_string(step));
    for (auto* ps : {&mine, &ref})
      for (auto& np : ps->named) np.tensor.set_grad(Tensor());
  }
}

TEST_P(DdpTest, NoSyncMicroStepsAccumulateLocally) {
  auto w = dist::world();
  const int64_t P = w->size(), b = 2;
  Params mine = make_params(), ref = make_params();
  DistributedDataParallel ddp(mine.named, w, GetParam());
  // Two micro-batches of the global batch 2 * P * b: micro m, rank r holds rows
  // m * P * b + r * b .. + b.
  for (int m = 0; m < 2; ++m) {
    ddp.set_gradient_sync(m == 1);
    backward(mul_scalar(loss_of(mine, inputs(m * P * b + w->rank() * b, b)), 0.5));
  }
  ddp.finish_gradient_sync();
  backward(loss_of(ref, inputs(0, 2 * P * b)));
  expect_same_grads(mine, ref, "accumulated");
}

INSTANTIATE_TEST_SUITE_P(BucketSizes, DdpTest,
                         testing::Values(int64_t(16), int64_t(200), int64_t(1) << 20));

TEST(Ddp, BroadcastMakesReplicasEqual) {
  auto w = dist::world();
  Params p = make_params();
  fill_normal(p.w2, RngKey{uint64_t(w->rank()), "different", ""});
  DistributedDataParallel ddp(p.named, w, 1 << 20);
  ddp.broadcast_parameters(0);
  Tensor want = Tensor::empty(p.w2.shape());
  fill_normal(want, RngKey{0, "different", ""});
  EXPECT_EQ(to_vector(p.w2), to_vector(want));
}

}  // namespace
}  // namespace loom::parallel
