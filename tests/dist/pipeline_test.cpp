// Pipeline schedules run for real: a stack of S = P x V stages (each tanh(x W_s)) over P ranks,
// M micro-batches, under GPipe, 1F1B and interleaved 1F1B, gives the one-process loss and the
// one-process gradient of every stage's weight (each rank checks the stages it holds; every
// rank computes the one-process reference itself).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/pipeline.h"

namespace loom::parallel {
namespace {

constexpr int64_t kB = 2, kD = 4;

Tensor draw(const Shape& shape, const std::string& what) {
  Tensor t = Tensor::empty(shape);
  fill_normal(t, RngKey{10, "pipeline_test", what}, 0, 0.0f, 0.7f);
  return t;
}

Tensor stage_forward(const Tensor& x, const Tensor& w) {
  return tanh(matmul(x, w));
}

struct PipeCase {
  ScheduleKind kind;
  int64_t chunks;
  const char* name;
};

class Pipeline : public testing::TestWithParam<PipeCase> {};

TEST_P(Pipeline, MatchesOneProcess) {
  const PipeCase c = GetParam();
  auto world = dist::world();
  const int64_t P = world->size(), r = world->rank(), V = c.chunks, S = P * V, M = 2 * P;
  std::vector<Tensor> weights, inputs, targets;
  for (int64_t s = 0; s < S; ++s) {
    weights.push_back(draw({kD, kD}, "w" + std::to_string(s)));
    weights.back().set_requires_grad(true);
  }
  for (int64_t m = 0; m < M; ++m) {
    inputs.push_back(draw({kB, kD}, "x" + std::to_string(m)));
    targets.push_back(draw({kB, kD}, "t" + std::to_string(m)));
  }
  auto loss_of = [&](const Tensor& out, int64_t m) { return sum(mul(out, targets[size_t(m)])); };
  // One process: every micro-batch through every stage; mean loss.
  double want_loss = 0;
  for (int64_t m = 0; m < M; ++m) {
    Tensor h = inputs[size_t(m)];
    for (int64_t s = 0; s < S; ++s) h = stage_forward(h, weights[size_t(s)]);
    Tensor loss = loss_of(h, m);
    want_loss += double(item(loss));
    backward(mul_scalar(loss, 1.0 / double(M)));
  }
  // The pipeline: this rank's stages with weights of their own.
  const PipeSchedule schedule = make_pipe_schedule(c.kind, P, M, V);
  std::vector<Tensor> mine;
  PipelineStages stages;
  for (int64_t chunk = 0; chunk < V; ++chunk) {
    Tensor w = contiguous(weights[size_t(schedule.stage_of(r, chunk))].detach()).detach();
    w.set_requires_grad(true);
    mine.push_back(w);
    stages.forward.push_back([w](const Tensor& x) { return stage_forward(x, w); });
  }
  stages.input = [&](int64_t m) { return inputs[size_t(m)]; };
  stages.loss = loss_of;
  stages.activation_shape = {kB, kD};
  const double got_loss = run_pipeline(schedule, stages, world);
  if (r == (S - 1) % P) {  // the rank holding the last stage
    EXPECT_NEAR(got_loss, want_loss, 1e-5 * (1 + std::abs(want_loss)));
  }
  for (int64_t chunk = 0; chunk < V; ++chunk) {
    const std::vector<float> got = to_vector(mine[size_t(chunk)].grad());
    const std::vector<float> want = to_vector(weights[size_t(schedule.stage_of(r, chunk))].grad());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i])))
          << c.name << ": stage " << schedule.stage_of(r, chunk) << " dW[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, Pipeline,
                         testing::Values(PipeCase{ScheduleKind::GPipe, 1, "gpipe"},
                                         PipeCase{ScheduleKind::OneFOneB, 1, "one_f_one_b"},
                                         PipeCase{ScheduleKind::Interleaved1F1B, 2,
                                                  "interleaved2"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::parallel
