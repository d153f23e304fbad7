// DiLoCo's outer step on P workers (one per rank) against a float64 reference each rank
// computes from what every worker contributed (a known function of its rank): the averaged
// pseudo-gradient, Nesterov momentum over two outer steps, the compressed exchange within its
// quantisation bound, error feedback keeping the sum of many compressed steps, and the bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "loom/dist/device_mesh.h"
#include "loom/dist/world.h"
#include "loom/lowcomm/diloco.h"
#include "loom/nn/layers.h"
#include "loom/parallel/parallelize.h"

namespace loom::lowcomm {
namespace {

// One worker per rank; the model: a Linear(40, 30) with bias, 1230 weights in two pieces.
struct Workers {
  dist::DeviceMesh mesh;
  nn::Linear model{40, 30};
  std::unique_ptr<parallel::ParallelModel> handle;
  Workers() : mesh(dist::world(), dist::ParallelDims{1, dist::world()->size(), 1, 1, 1}) {
    model.init_parameters(7);
    parallel::Topology t;
    t.dims = mesh.dims();
    t.outer_sync = true;
    handle = parallel::parallelize(model, {}, mesh, t, 1);
  }
  int64_t numel() const { return 40 * 30 + 30; }
  // The weights of this rank's pieces, flat.
  std::vector<double> weights() const {
    std::vector<double> w;
    for (const auto& p : handle->pieces())
      for (int64_t i = 0; i < p.value.numel(); ++i) w.push_back(p.value.data<float>()[i]);
    return w;
  }
  void set_weights(const std::vector<double>& w) {
    size_t k = 0;
    for (const auto& p : handle->pieces())
      for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = float(w[k++]);
  }
};

// What worker r moved element i by in round k (its pseudo-gradient before averaging).
double moved(int r, int64_t i, int k) {
  return 0.01 * std::sin(0.31 * double(i) + 1.7 * r + 0.9 * k) * (1 + 0.5 * r);
}

DiLoCoConfig config_for(int P, double lr, double mu, Compression kind, bool feedback) {
  DiLoCoConfig c;
  c.workers = P;
  c.outer_lr = lr;
  c.outer_momentum = mu;
  c.quant = {kind, 64, DType::F32};
  c.error_feedback = feedback;
  return c;
}

TEST(DiLoCo, OuterNesterovStepOnTheAveragedPseudoGradient) {
  Workers w;
  const int P = w.mesh.world()->size(), me = w.mesh.world()->rank();
  const double lr = 0.7, mu = 0.9;
  DiLoCo diloco(*w.handle, w.mesh.group("dp_replicate"),
                config_for(P, lr, mu, Compression::None, false));
  std::vector<double> global = w.weights(), v(global.size(), 0.0);
  for (int k = 0; k < 2; ++k) {
    // Every worker starts the round from the global weights and moves by its own amount.
    std::vector<double> local = global;
    for (size_t i = 0; i < local.size(); ++i) local[i] -= moved(me, int64_t(i), k);
    w.set_weights(local);
    diloco.after_step(49, false);  // H = 50: fragment 0 is due
    for (size_t i = 0; i < global.size(); ++i) {
      double avg = 0;  // of (global - local_r), as float32 values
      for (int r = 0; r < P; ++r)
        avg += double(float(global[i])) -
               double(float(float(global[i]) - float(moved(r, int64_t(i), k))));
      avg /= P;
      v[i] = mu * v[i] + avg;
      global[i] -= lr * (avg + mu * v[i]);
    }
    const std::vector<double> got = w.weights();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], global[i], 2e-6 * (1 + std::abs(global[i])))
          << "round " << k << " element " << i;
  }
}

// One outer step with lr 1 and no momentum moves the weights by exactly the exchanged average:
// compressed, it stays within the two quantisations' bound of the true average (half a scale
// each: the worker's of its contribution, the owner's of the average); two workers exchange
// their whole codes in one phase, quantised once (half a scale).
TEST(DiLoCo, CompressedAverageWithinTheQuantisationBound) {
  for (Compression kind : {Compression::Int8, Compression::Int4}) {
    Workers w;
    const int P = w.mesh.world()->size(), me = w.mesh.world()->rank();
    DiLoCo diloco(*w.handle, w.mesh.group("dp_replicate"), config_for(P, 1.0, 0.0, kind, true));
    const std::vector<double> global = w.weights();
    std::vector<double> local = global;
    for (size_t i = 0; i < local.size(); ++i) local[i] -= moved(me, int64_t(i), 0);
    w.set_weights(local);
    const int64_t before = dist::bytes_sent();
    diloco.after_step(49, false);  // H = 50: fragment 0 is due
    const int64_t sent = dist::bytes_sent() - before;
    const std::vector<double> got = w.weights();
    const double qmax = kind == Compression::Int8 ? 127 : 7;
    const int64_t N = w.numel(), B = 64;
    for (int64_t b0 = 0; b0 < N; b0 += B) {
      double amax = 0;  // the largest contribution in the block, over the workers
      for (int r = 0; r < P; ++r)
        for (int64_t i = b0; i < std::min(N, b0 + B); ++i)
          amax = std::max(amax, std::abs(moved(r, i, 0)));
      for (int64_t i = b0; i < std::min(N, b0 + B); ++i) {
        double avg = 0;
        for (int r = 0; r < P; ++r) avg += moved(r, i, 0);
        avg /= P;
        const double step = global[size_t(i)] - got[size_t(i)];
        const double scales = P == 2 ? 0.51 : 1.01;
        ASSERT_NEAR(step, avg, scales * amax / qmax + 1e-6) << name_of(kind) << " element " << i;
      }
    }
    // Two workers: one phase, the whole codes. Otherwise two phases of P - 1 shares each, a
    // share padded to the largest (blocks split evenly).
    if (P == 2) {
      EXPECT_EQ(sent, encoded_bytes({kind, B, DType::F32}, N)) << name_of(kind);
      continue;
    }
    const int64_t nb = (N + B - 1) / B;
    int64_t E = 0;
    for (int j = 0; j < P; ++j) {
      const int64_t lo = std::min(N, nb * j / P * B), hi = std::min(N, nb * (j + 1) / P * B);
      E = std::max(E, encoded_bytes({kind, B, DType::F32}, hi - lo));
    }
    EXPECT_EQ(sent, P > 1 ? 2 * (P - 1) * E : 0) << name_of(kind);
  }
}

// Values well below a block's scale round to 0 every time: without error feedback they are
// never applied, with it their sum is (to within a scale) after any number of outer steps.
TEST(DiLoCo, ErrorFeedbackKeepsTheSumOfCompressedSteps) {
  const int K = 24;
  for (bool feedback : {true, false}) {
    Workers w;
    const int P = w.mesh.world()->size();
    DiLoCo diloco(*w.handle, w.mesh.group("dp_replicate"),
                  config_for(P, 1.0, 0.0, Compression::Int4, feedback));
    const std::vector<double> start = w.weights();
    // Every worker moves every element by 0.3 units, but the first of each block by 7.
    const double unit = 1e-3;
    auto amount = [&](int64_t i) { return (i % 64 == 0 ? 7.0 : 0.3) * unit; };
    for (int k = 0; k < K; ++k) {
      std::vector<double> local = w.weights();
      for (size_t i = 0; i < local.size(); ++i) local[i] -= amount(int64_t(i));
      w.set_weights(local);
      diloco.after_step(49, false);  // H = 50: fragment 0 is due
    }
    const std::vector<double> got = w.weights();
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs((start[i] - got[i]) - K * amount(int64_t(i))));
    if (feedback) {
      EXPECT_LT(worst, 2.0 * unit) << "after " << K << " steps";
    } else {
      EXPECT_GT(worst, 0.25 * K * unit) << "without feedback the small values should be lost";
    }
  }
}

// Streaming: H = 4 in F = 2 fragments (the weight matrix, then the bias: runs of whole pieces
// of about half the elements each), each exchange overlapped with tau = 1 inner step and merged
// with mixing alpha. Fragment 1's exchanges start after steps 1 and 5, fragment 0's after step
// 3 (and 7); each is applied one step later, at the last step every fragment is brought to the
// global weights. The late merge against a float64 reference: lr 1 and no momentum, so the new
// global weights are the workers' mean at the start of the exchange, and the worker continues
// from alpha * (where it got to) + (1 - alpha) * them.
// H = 4 in 2 fragments, each exchange overlapped with 1 inner step, merged with mixing 0.5.
DiLoCoConfig streaming(DiLoCoConfig c) {
  c.inner_steps = 4;
  c.fragments = 2;
  c.overlap_steps = 1;
  c.mixing = 0.5;
  return c;
}

TEST(DiLoCo, StreamingFragmentsOverlapAndMerge) {
  Workers w;
  const int P = w.mesh.world()->size(), me = w.mesh.world()->rank();
  const DiLoCoConfig c = streaming(config_for(P, 1.0, 0.0, Compression::None, false));
  DiLoCo diloco(*w.handle, w.mesh.group("dp_replicate"), c);
  const std::vector<double> global = w.weights();
  std::vector<double> local;
  for (int64_t step = 0; step <= 2; ++step) {  // the inner steps: each worker its own amount
    local = w.weights();
    for (size_t i = 0; i < local.size(); ++i) local[i] -= moved(me, int64_t(i), int(step));
    w.set_weights(local);
    const auto out = diloco.after_step(step, false);
    EXPECT_EQ(out.has_value(), step == 2) << "step " << step;  // fragment 1, started after 1
  }
  const std::vector<double> got = w.weights();
  const int64_t bias_begin = 40 * 30;  // fragment 1: the bias, after the weight's 1200
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (i < bias_begin) {  // fragment 0: not exchanged yet, the worker's own
      ASSERT_EQ(got[size_t(i)], double(float(local[size_t(i)]))) << "element " << i;
      continue;
    }
    double mean = 0;  // the workers' weights after step 1, when the exchange started
    for (int r = 0; r < P; ++r)
      mean += double(float(global[size_t(i)])) - moved(r, i, 0) - moved(r, i, 1);
    mean /= P;
    ASSERT_NEAR(got[size_t(i)], 0.5 * local[size_t(i)] + 0.5 * mean, 1e-5) << "element " << i;
  }
}

TEST(DiLoCo, StreamingScheduleAndTheEnd) {
  Workers w;
  const int P = w.mesh.world()->size();
  const DiLoCoConfig c = streaming(config_for(P, 0.7, 0.9, Compression::Int8, true));
  DiLoCo diloco(*w.handle, w.mesh.group("dp_replicate"), c);
  std::vector<int64_t> applied;  // step * 10 + fragments applied
  for (int64_t step = 0; step < 8; ++step) {
    std::vector<double> local = w.weights();
    for (size_t i = 0; i < local.size(); ++i)
      local[i] -= moved(w.mesh.world()->rank(), int64_t(i), int(step));
    w.set_weights(local);
    if (const auto out = diloco.after_step(step, step == 7))
      applied.push_back(step * 10 + out->fragments);
  }
  // Fragment 1 at steps 2 and 6, fragment 0 at 4; at the last step fragment 0 (started there)
  // and fragment 1 (merged at 6, so off the global weights) again: 2.
  EXPECT_EQ(applied, (std::vector<int64_t>{21, 41, 61, 72}));
  // Every worker ends on the same weights.
  const std::vector<double> mine = w.weights();
  Tensor t = Tensor::empty({int64_t(mine.size())});
  for (size_t i = 0; i < mine.size(); ++i) t.data<float>()[i] = float(mine[i]);
  Tensor top = Tensor::empty({int64_t(mine.size())});
  std::memcpy(top.data_ptr(), t.data_ptr(), t.nbytes());
  w.mesh.world()->all_reduce(top, dist::ReduceOp::Max)->wait();
  for (size_t i = 0; i < mine.size(); ++i) ASSERT_EQ(t.data<float>()[i], top.data<float>()[i]) << i;
}

TEST(DiLoCo, FloatExchangeBytesAreAnAllReduce) {
  Workers w;
  const int P = w.mesh.world()->size();
  DiLoCo diloco(*w.handle, w.mesh.group("dp_replicate"),
                config_for(P, 0.7, 0.9, Compression::None, false));
  const int64_t before = dist::bytes_sent();
  diloco.after_step(49, false);  // H = 50: fragment 0 is due
  const double want = 2.0 * (P - 1) / P * 4.0 * double(w.numel());
  EXPECT_NEAR(double(dist::bytes_sent() - before), want, 1.0);
}

}  // namespace
}  // namespace loom::lowcomm
