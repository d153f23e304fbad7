// Multi-head latent attention (nn/mla.h):
//  - forward against a float64 reference written from DeepSeek-V2's equations (latent, its RMS
//    norm, per-head up-projections, decoupled RoPE with one shared rotated key, causal softmax
//    over q_nope . k_nope + q_rope . k_rope scaled by 1/sqrt(nope + rope)), with and without a
//    query latent, values narrower and wider than q/k (the kernel's padding either way), a
//    sliding window, positions not starting at 0;
//  - the absorbed decode (queries mapped into the latent space, MQA over the cached latents)
//    over a sequence in pieces equals forward, and its cache holds kv_rank + rope values a token;
//  - a bad config is one clear error.
// Gradients: Gpt.GradientMatchesFiniteDifferences ("mla").
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "expect_error.h"
#include "loom/nn/mla.h"
#include "loom/ops/ops.h"

namespace loom::nn {
namespace {

using Vec = std::vector<double>;

Vec to_doubles(const Tensor& t) {
  const std::vector<float> f = to_vector(t);
  return Vec(f.begin(), f.end());
}

// y = W x for W (out, in) row-major.
Vec apply(const Vec& W, const Vec& x, int64_t out, int64_t in, int64_t x_at = 0) {
  Vec y(size_t(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[size_t(o)] += W[size_t(o * in + i)] * x[size_t(x_at + i)];
  return y;
}

Vec rms_norm(const Vec& v, const Vec& w, double eps) {
  double ms = 0;
  for (double e : v) ms += e * e;
  const double r = 1.0 / std::sqrt(ms / double(v.size()) + eps);
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * r * w[i];
  return out;
}

// Rotate-half RoPE of v at position p: pairs (i, i + D/2) turned by p theta^(-2i/D).
Vec rotate(const Vec& v, double p, double theta) {
  const size_t D = v.size(), half = D / 2;
  Vec out(D);
  for (size_t i = 0; i < half; ++i) {
    const double a = p * std::pow(theta, -2.0 * double(i) / double(D));
    out[i] = v[i] * std::cos(a) - v[i + half] * std::sin(a);
    out[i + half] = v[i + half] * std::cos(a) + v[i] * std::sin(a);
  }
  return out;
}

Vec slice(const Vec& v, size_t at, size_t n) {
  return Vec(v.begin() + long(at), v.begin() + long(at + n));
}

// The layer's output for x (B, T, dim) at positions first..first+T-1, in float64.
Vec reference(const LatentAttention& m, const Vec& x, int64_t B, int64_t T, int64_t first) {
  const MlaConfig& c = m.config;
  const int64_t H = c.heads, qk = c.nope_dim + c.rope_dim, C = c.dim, R = c.kv_rank;
  const double eps = c.norm_eps;
  Vec out(size_t(B * T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Vec> q(static_cast<size_t>(T)), latent(static_cast<size_t>(T)),
        k_rope(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t at = (b * T + t) * C;
      q[size_t(t)] = m.q_proj
                         ? apply(to_doubles(m.q_proj->weight), x, H * qk, C, at)
                         : apply(to_doubles(m.q_up->weight),
                                 rms_norm(apply(to_doubles(m.q_down->weight), x, c.q_rank, C, at),
                                          to_doubles(m.q_norm->weight), eps),
                                 H * qk, c.q_rank);
      const Vec kv = apply(to_doubles(m.kv_down->weight), x, R + c.rope_dim, C, at);
      latent[size_t(t)] = rms_norm(slice(kv, 0, size_t(R)), to_doubles(m.kv_norm->weight), eps);
      k_rope[size_t(t)] =
          rotate(slice(kv, size_t(R), size_t(c.rope_dim)), double(first + t), c.rope_theta);
    }
    const Vec w_up = to_doubles(m.kv_up->weight);  // (H (nope + v), R)
    Vec heads_out(size_t(T * H * c.v_dim), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = h * (c.nope_dim + c.v_dim);
      for (int64_t i = 0; i < T; ++i) {
        const Vec qh = slice(q[size_t(i)], size_t(h * qk), size_t(qk));
        const Vec q_rot = rotate(slice(qh, size_t(c.nope_dim), size_t(c.rope_dim)),
                                 double(first + i), c.rope_theta);
        Vec scores;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j <= i; ++j) {
          if (c.window > 0 && j <= i - c.window) continue;
          double s = 0;
          for (int64_t d = 0; d < c.nope_dim; ++d) {
            double k = 0;
            for (int64_t r = 0; r < R; ++r)
              k += w_up[size_t((row + d) * R + r)] * latent[size_t(j)][size_t(r)];
            s += qh[size_t(d)] * k;
          }
          for (int64_t d = 0; d < c.rope_dim; ++d)
            s += q_rot[size_t(d)] * k_rope[size_t(j)][size_t(d)];
          scores.push_back(s / std::sqrt(double(qk)));
          keys.push_back(j);
        }
        double mx = -1e300, sum = 0;
        for (double s : scores) mx = std::max(mx, s);
        for (double& s : scores) sum += (s = std::exp(s - mx));
        for (size_t n = 0; n < keys.size(); ++n) {
          const int64_t j = keys[n];
          for (int64_t e = 0; e < c.v_dim; ++e) {
            double v = 0;
            for (int64_t r = 0; r < R; ++r)
              v += w_up[size_t((row + c.nope_dim + e) * R + r)] * latent[size_t(j)][size_t(r)];
            heads_out[size_t((i * H + h) * c.v_dim + e)] += scores[n] / sum * v;
          }
        }
      }
    }
    const Vec w_proj = to_doubles(m.proj->weight);
    for (int64_t t = 0; t < T; ++t) {
      const Vec y = apply(w_proj, heads_out, C, H * c.v_dim, t * H * c.v_dim);
      for (int64_t o = 0; o < C; ++o) out[size_t((b * T + t) * C + o)] = y[size_t(o)];
    }
  }
  return out;
}

MlaConfig small(int64_t q_rank, int64_t v_dim, int64_t window) {
  MlaConfig c;
  c.dim = 12, c.heads = 2, c.kv_rank = 5, c.q_rank = q_rank, c.nope_dim = 3, c.rope_dim = 4;
  c.v_dim = v_dim, c.window = window, c.rope_theta = 100.0;
  return c;
}

std::unique_ptr<LatentAttention> make(const MlaConfig& c) {
  auto m = std::make_unique<LatentAttention>(c);
  for (auto& p : m->named_parameters()) {  // norm gains away from 1, so they count
    const bool gain = p.name.find("norm") != std::string::npos;
    fill_normal(p.tensor, RngKey{3, "mla_test", p.name}, 0, gain ? 1.0f : 0.0f, gain ? 0.3f : 0.4f);
  }
  return m;
}

double relative_error(const std::vector<float>& got, const Vec& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

struct Case {
  int64_t q_rank, v_dim, window;
};

// f32 against float64: 2e-5 of the largest output (measured below 1e-6).
TEST(LatentAttention, ForwardMatchesTheFloat64Equations) {
  for (const Case k : {Case{0, 3, 0}, Case{4, 3, 0}, Case{0, 9, 0}, Case{4, 7, 3}}) {
    SCOPED_TRACE("q_rank " + std::to_string(k.q_rank) + ", v_dim " + std::to_string(k.v_dim) +
                 ", window " + std::to_string(k.window));
    const auto m = make(small(k.q_rank, k.v_dim, k.window));
    const int64_t B = 2, T = 7, first = 3;
    const Tensor x = randn({B, T, 12}, RngKey{4, "mla_test", "x"});
    NoGradGuard no_grad;
    std::vector<int64_t> positions;
    for (int64_t t = 0; t < T; ++t) positions.push_back(first + t);
    const std::vector<float> got = to_vector(m->forward(x, from_vector(positions, {T})));
    EXPECT_LT(relative_error(got, reference(*m, to_doubles(x), B, T, first)), 2e-5);
  }
}

// The absorbed decode over a prefill, single tokens and a chunk gives forward's outputs; the
// cache is one key/value head of kv_rank + rope values a token.
TEST(LatentAttention, AbsorbedDecodeEqualsForward) {
  for (const Case k : {Case{0, 3, 0}, Case{4, 9, 3}}) {
    const auto m = make(small(k.q_rank, k.v_dim, k.window));
    const int64_t B = 2, T = 9, C = 12;
    const Tensor x = randn({B, T, C}, RngKey{5, "mla_test", "x"});
    NoGradGuard no_grad;
    const std::vector<float> whole = to_vector(m->forward(x, arange(T)));
    KvCache cache;
    int64_t at = 0;
    for (int64_t len : {4, 1, 1, 3}) {
      const std::vector<float> got =
          to_vector(m->forward_cached(contiguous(narrow(x, 1, at, len)), cache, T));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < len; ++t)
          for (int64_t o = 0; o < C; ++o)
            ASSERT_NEAR(got[size_t((b * len + t) * C + o)], whole[size_t((b * T + at + t) * C + o)],
                        2e-5)
                << "position " << at + t << ", window " << k.window;
      at += len;
    }
    EXPECT_EQ(cache.length, T);
    EXPECT_EQ(cache.k.shape(), Shape({B, 1, T, 5 + 4}));
    EXPECT_FALSE(cache.v.defined());
  }
}

TEST(LatentAttention, BadConfigIsOneClearError) {
  MlaConfig c = small(0, 3, 0);
  c.rope_dim = 3;
  expect_error([&] { LatentAttention m(c); }, {"mla_rope_dim 3 must be even"});
  c = small(0, 3, 0);
  c.kv_rank = 0;
  expect_error([&] { LatentAttention m(c); }, {"mla_kv_rank 0"});
}

}  // namespace
}  // namespace loom::nn
