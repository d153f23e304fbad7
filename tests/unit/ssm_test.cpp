// The Mamba-2 pieces: the scan -- the chunked SSD form (nn::ssd_scan, composed ops) and the
// backend's step-by-step kernel (ssm_scan, checkpointing every `chunk` steps) -- against its
// recurrence written out in float64 (values and, by central differences, gradients), and the
// mixer's causality and incremental decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "loom/nn/mamba2.h"
#include "loom/nn/ssd.h"
#include "loom/ops/ops.h"

namespace {

using loom::Tensor;

struct Sizes {
  int64_t B, T, H, P, G, N;
};

// The scan's inputs as float64 vectors, row-major in the shapes ssd_scan takes.
struct Inputs {
  std::vector<double> x, dt, A, Bm, Cm, h0;  // h0 empty: zeros
};

Inputs random_inputs(const Sizes& s, bool initial_state, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), step(0.01, 0.5), rate(0.5, 3.0);
  auto draw = [&](int64_t n, auto& dist) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& e : v) e = dist(gen);
    return v;
  };
  Inputs in;
  in.x = draw(s.B * s.T * s.H * s.P, unit);
  in.dt = draw(s.B * s.T * s.H, step);
  in.A = draw(s.H, rate);
  for (auto& a : in.A) a = -a;
  in.Bm = draw(s.B * s.T * s.G * s.N, unit);
  in.Cm = draw(s.B * s.T * s.G * s.N, unit);
  if (initial_state) in.h0 = draw(s.B * s.H * s.P * s.N, unit);
  return in;
}

// The recurrence step by step: S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t.
// Returns y (B, T, H, P) followed by the final states (B, H, P, N).
std::vector<double> recurrence(const Sizes& s, const Inputs& in) {
  const int64_t B = s.B, T = s.T, H = s.H, P = s.P, G = s.G, N = s.N;
  std::vector<double> y(size_t(B * T * H * P)), final(size_t(B * H * P * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      std::vector<double> S(size_t(P * N), 0.0);
      if (!in.h0.empty())
        for (int64_t i = 0; i < P * N; ++i) S[size_t(i)] = in.h0[size_t((b * H + h) * P * N + i)];
      for (int64_t t = 0; t < T; ++t) {
        const double dt = in.dt[size_t((b * T + t) * H + h)],
                     decay = std::exp(dt * in.A[size_t(h)]);
        const double* x = &in.x[size_t(((b * T + t) * H + h) * P)];
        const double* Bt = &in.Bm[size_t(((b * T + t) * G + g) * N)];
        const double* Ct = &in.Cm[size_t(((b * T + t) * G + g) * N)];
        for (int64_t p = 0; p < P; ++p) {
          double out = 0;
          for (int64_t n = 0; n < N; ++n) {
            double& e = S[size_t(p * N + n)];
            e = decay * e + dt * x[p] * Bt[n];
            out += e * Ct[n];
          }
          y[size_t(((b * T + t) * H + h) * P + p)] = out;
        }
      }
      std::copy(S.begin(), S.end(), final.begin() + (b * H + h) * P * N);
    }
  y.insert(y.end(), final.begin(), final.end());
  return y;
}

Tensor tensor_of(const std::vector<double>& v, const loom::Shape& shape) {
  return loom::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

struct Leaves {
  Tensor x, dt, A, Bm, Cm, h0;
};

Leaves leaves_of(const Sizes& s, const Inputs& in) {
  Leaves l{tensor_of(in.x, {s.B, s.T, s.H, s.P}),
           tensor_of(in.dt, {s.B, s.T, s.H}),
           tensor_of(in.A, {s.H}),
           tensor_of(in.Bm, {s.B, s.T, s.G, s.N}),
           tensor_of(in.Cm, {s.B, s.T, s.G, s.N}),
           Tensor()};
  if (!in.h0.empty()) l.h0 = tensor_of(in.h0, {s.B, s.H, s.P, s.N});
  return l;
}

// Either scan: the chunked composed ops, or the kernel keeping its state every `chunk` steps.
loom::nn::SsdResult scan(const Leaves& l, int64_t chunk, bool kernel) {
  if (!kernel) return loom::nn::ssd_scan(l.x, l.dt, l.A, l.Bm, l.Cm, chunk, l.h0);
  const loom::SsmScanResult r = loom::ssm_scan(l.x, l.dt, l.A, l.Bm, l.Cm, chunk, l.h0);
  return {r.y, r.final_state};
}

TEST(Ssd, ChunkedScanAndKernelEqualTheRecurrenceInFloat64) {
  // Chunks of one step, a few that do not divide T, and one longer than T; shared and
  // per-head B and C; with and without a state carried in.
  for (bool kernel : {false, true})
    for (const Sizes s : {Sizes{2, 37, 4, 3, 2, 5}, Sizes{1, 40, 2, 4, 2, 3}})
      for (int64_t chunk : {1, 8, 16, 64})
        for (bool initial : {false, true}) {
          SCOPED_TRACE(std::string(kernel ? "kernel" : "chunked") + " T " + std::to_string(s.T) +
                       " G " + std::to_string(s.G) + " chunk " + std::to_string(chunk) +
                       (initial ? " with a state" : ""));
          const Inputs in = random_inputs(s, initial, 7);
          const std::vector<double> want = recurrence(s, in);
          const Leaves l = leaves_of(s, in);
          const loom::nn::SsdResult r = scan(l, chunk, kernel);
          ASSERT_EQ(r.y.shape(), (loom::Shape{s.B, s.T, s.H, s.P}));
          ASSERT_EQ(r.final_state.shape(), (loom::Shape{s.B, s.H, s.P, s.N}));
          std::vector<double> got = loom::to_vector_f64(r.y);
          const std::vector<double> final = loom::to_vector_f64(r.final_state);
          got.insert(got.end(), final.begin(), final.end());
          double scale = 0, worst = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            scale = std::max(scale, std::abs(want[i]));
            worst = std::max(worst, std::abs(got[i] - want[i]));
          }
          EXPECT_LE(worst, 2e-6 * scale) << "scale " << scale;
        }
}

// Every input's gradient against central differences of the float64 recurrence (eps 1e-5:
// truncation ~1e-10, far below f32's rounding), for loss = sum(y wy) + sum(S_T wS).
TEST(Ssd, GradientsMatchFiniteDifferencesOfTheRecurrence) {
  // The kernel with checkpoints every 4 steps (11 = 4 + 4 + 3: a short last chunk) and every
  // step; the chunked scan in chunks of 4.
  for (const int64_t kernel_every : {0, 4, 1}) {
    SCOPED_TRACE(kernel_every ? "kernel, every " + std::to_string(kernel_every) : "chunked");
    const Sizes s{1, 11, 4, 2, 2, 3};
    Inputs in = random_inputs(s, true, 11);
    std::mt19937 gen(12);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    const size_t outputs = size_t(s.B * s.T * s.H * s.P + s.B * s.H * s.P * s.N);
    std::vector<double> w(outputs);
    for (auto& e : w) e = unit(gen);
    auto loss_of = [&](const Inputs& at) {
      const std::vector<double> o = recurrence(s, at);
      double sum = 0;
      for (size_t i = 0; i < o.size(); ++i) sum += o[i] * w[i];
      return sum;
    };

    Leaves l = leaves_of(s, in);
    for (Tensor* t : {&l.x, &l.dt, &l.A, &l.Bm, &l.Cm, &l.h0}) t->set_requires_grad(true);
    const loom::nn::SsdResult r = scan(l, kernel_every ? kernel_every : 4, kernel_every > 0);
    const std::vector<float> wv(w.begin(), w.end());
    const int64_t ny = r.y.numel();
    const Tensor wy =
        loom::from_vector(std::vector<float>(wv.begin(), wv.begin() + ny), r.y.shape());
    const Tensor ws =
        loom::from_vector(std::vector<float>(wv.begin() + ny, wv.end()), r.final_state.shape());
    loom::backward(
        loom::add(loom::sum(loom::mul(r.y, wy)), loom::sum(loom::mul(r.final_state, ws))));

    const double eps = 1e-5;
    int checked = 0;
    const std::vector<std::pair<const char*, std::pair<std::vector<double>*, Tensor*>>> inputs = {
        {"x", {&in.x, &l.x}},   {"dt", {&in.dt, &l.dt}}, {"A", {&in.A, &l.A}},
        {"B", {&in.Bm, &l.Bm}}, {"C", {&in.Cm, &l.Cm}},  {"initial_state", {&in.h0, &l.h0}}};
    for (const auto& [name, pair] : inputs) {
      std::vector<double>& v = *pair.first;
      ASSERT_TRUE(pair.second->grad().defined()) << name;
      const std::vector<double> grad = loom::to_vector_f64(pair.second->grad());
      for (size_t i = 0; i < v.size(); ++i) {
        const double saved = v[i];
        v[i] = saved + eps;
        const double up = loss_of(in);
        v[i] = saved - eps;
        const double down = loss_of(in);
        v[i] = saved;
        const double fd = (up - down) / (2 * eps);
        EXPECT_NEAR(grad[i], fd, 1e-4 * std::abs(fd) + 1e-5) << name << "[" << i << "]";
        ++checked;
      }
    }
    EXPECT_EQ(checked, 88 + 44 + 4 + 66 + 66 + 24);
  }
}

loom::nn::Mamba2Config small_mixer() {
  loom::nn::Mamba2Config c;
  c.dim = 12;
  c.state = 4;
  c.head_dim = 6;  // inner 24: 4 heads
  c.groups = 2;
  c.chunk = 5;
  return c;
}

Tensor random_input(int64_t B, int64_t T, int64_t C, uint64_t seed) {
  return loom::randn({B, T, C}, loom::RngKey{seed, "input", ""});
}

// Changing row t never changes an earlier output row; it does change its own and later ones.
TEST(Mamba2, OutputsAreCausal) {
  loom::nn::Mamba2 mixer(small_mixer());
  mixer.init_parameters(3);
  const int64_t B = 2, T = 13, C = 12, t = 7;
  Tensor u = random_input(B, T, C, 1);
  const std::vector<float> before = loom::to_vector(mixer.forward(u));
  loom::narrow(u, 1, t, 1).data<float>()[0] += 1.0f;  // row t of batch row 0
  const std::vector<float> after = loom::to_vector(mixer.forward(u));
  for (int64_t s = 0; s < T; ++s) {
    double diff = 0;
    for (int64_t c = 0; c < C; ++c)
      diff += std::abs(after[size_t(s * C + c)] - before[size_t(s * C + c)]);
    if (s < t)
      EXPECT_EQ(diff, 0.0) << "row " << s;
    else
      EXPECT_GT(diff, 0.0) << "row " << s;
  }
}

// Decoding in pieces (a prompt, then single rows, then a few) carries the convolution inputs
// and the state: it equals one forward over the whole sequence.
TEST(Mamba2, DecodingInPiecesEqualsTheWholeForward) {
  for (bool kernel : {false, true}) {  // the chunked scan, the kernel
    SCOPED_TRACE(kernel ? "kernel" : "chunked");
    loom::nn::Mamba2Config config = small_mixer();
    config.scan_kernel = kernel;
    loom::nn::Mamba2 mixer(config);
    mixer.init_parameters(4);
    const int64_t B = 2, T = 17, C = 12;
    const Tensor u = random_input(B, T, C, 2);
    const std::vector<float> whole = loom::to_vector(mixer.forward(u));
    loom::nn::KvCache cache;
    std::vector<Tensor> pieces;
    int64_t at = 0;
    for (int64_t n : {6, 1, 1, 1, 3, 5}) {
      pieces.push_back(mixer.forward_cached(loom::contiguous(loom::narrow(u, 1, at, n)), cache));
      at += n;
      EXPECT_EQ(cache.length, at);
    }
    const std::vector<float> got = loom::to_vector(loom::cat(pieces, 1));
    ASSERT_EQ(got.size(), whole.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, double(std::abs(got[i] - whole[i])));
      scale = std::max(scale, double(std::abs(whole[i])));
    }
    EXPECT_LE(worst, 1e-5 * scale);
  }
}

TEST(Mamba2, BadShapesAreRefusedNamingTheField) {
  loom::nn::Mamba2Config c = small_mixer();
  c.head_dim = 5;  // inner 24 not divisible
  EXPECT_THROW({ loom::nn::Mamba2 m(c); }, loom::Error);
  c = small_mixer();
  c.groups = 3;  // 4 heads
  try {
    loom::nn::Mamba2 m(c);
    FAIL() << "accepted 4 heads in 3 groups";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ssm_groups 3"), std::string::npos) << e.what();
  }
}

}  // namespace
