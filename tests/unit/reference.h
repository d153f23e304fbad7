// Float64 reference implementations of Loom's ops, written independently of the library
// (plain loops over row-major arrays), used as ground truth by the op tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

namespace ref {

using Shape = std::vector<int64_t>;

struct R {
  Shape shape;
  std::vector<double> v;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  int64_t dim() const { return int64_t(shape.size()); }
  int64_t size(int64_t d) const { return shape[size_t(d < 0 ? d + dim() : d)]; }
};

inline R zeros(const Shape& s) {
  R r{s, {}};
  r.v.assign(size_t(r.numel()), 0.0);
  return r;
}

inline Shape strides_of(const Shape& s) {
  Shape st(s.size());
  int64_t k = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = k;
    k *= s[i];
  }
  return st;
}

// Multi-index of linear position i.
inline Shape unravel(int64_t i, const Shape& s) {
  Shape idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}

inline int64_t ravel(const Shape& idx, const Shape& s) {
  int64_t k = 0;
  for (size_t d = 0; d < s.size(); ++d) k = k * s[d] + idx[d];
  return k;
}

inline Shape broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape o(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    o[i] = da == 1 ? db : da;
  }
  return o;
}

// Value of `x` at the broadcast multi-index `idx` (of a possibly larger shape).
inline double at_broadcast(const R& x, const Shape& idx) {
  const size_t lead = idx.size() - x.shape.size();
  int64_t k = 0;
  for (size_t d = 0; d < x.shape.size(); ++d)
    k = k * x.shape[d] + (x.shape[d] == 1 ? 0 : idx[lead + d]);
  return x.v[size_t(k)];
}

inline R binary(const R& a, const R& b, const std::function<double(double, double)>& f) {
  R o = zeros(broadcast(a.shape, b.shape));
  for (int64_t i = 0; i < o.numel(); ++i) {
    Shape idx = unravel(i, o.shape);
    o.v[size_t(i)] = f(at_broadcast(a, idx), at_broadcast(b, idx));
  }
  return o;
}

inline R unary(const R& a, const std::function<double(double)>& f) {
  R o = a;
  for (double& x : o.v) x = f(x);
  return o;
}

inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

// Reduce over `dims` (all if empty) with keepdim; op "sum", "mean" or "max".
inline R reduce(const R& x, std::vector<int64_t> dims, bool keepdim, const char* op) {
  std::vector<bool> red(x.shape.size(), dims.empty());
  for (int64_t d : dims) red[size_t(d < 0 ? d + x.dim() : d)] = true;
  Shape keep;
  for (size_t d = 0; d < x.shape.size(); ++d) keep.push_back(red[d] ? 1 : x.shape[d]);
  R o = zeros(keep);
  std::vector<int64_t> count(o.v.size(), 0);
  const bool is_max = std::string(op) == "max";
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, x.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      if (red[d]) idx[d] = 0;
    const size_t k = size_t(ravel(idx, keep));
    const double v = x.v[size_t(i)];
    if (is_max) {
      o.v[k] = count[k] == 0 ? v : std::max(o.v[k], v);
    } else {
      o.v[k] += v;
    }
    count[k]++;
  }
  if (std::string(op) == "mean")
    for (size_t k = 0; k < o.v.size(); ++k) o.v[k] /= double(count[k]);
  if (!keepdim) {
    Shape s;
    for (size_t d = 0; d < x.shape.size(); ++d)
      if (!red[d]) s.push_back(x.shape[d]);
    o.shape = s;
  }
  return o;
}

// (.., M, K) @ (.., K, N) with a 2-D operand broadcasting over the other's batch.
inline R matmul(const R& a, const R& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const int64_t Ba = a.dim() == 3 ? a.shape[0] : 1, Bb = b.dim() == 3 ? b.shape[0] : 1;
  const int64_t B = std::max(Ba, Bb);
  R o = zeros(a.dim() == 3 || b.dim() == 3 ? Shape{B, M, N} : Shape{M, N});
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += a.v[size_t((Ba == 1 ? 0 : bi) * M * K + m * K + k)] *
               b.v[size_t((Bb == 1 ? 0 : bi) * K * N + k * N + n)];
        o.v[size_t(bi * M * N + m * N + n)] = s;
      }
  return o;
}

inline R permute(const R& x, const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d : dims) s.push_back(x.shape[size_t(d)]);
  R o = zeros(s);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Shape oi = unravel(i, s), xi(x.shape.size());
    for (size_t k = 0; k < dims.size(); ++k) xi[size_t(dims[k])] = oi[k];
    o.v[size_t(i)] = x.v[size_t(ravel(xi, x.shape))];
  }
  return o;
}

inline R transpose_last(const R& x) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  return permute(x, dims);
}

// x (.., K) @ w (N, K)^T + b (N)
inline R linear(const R& x, const R& w, const R* b) {
  const int64_t K = x.size(-1), N = w.shape[0], M = x.numel() / K;
  Shape s = x.shape;
  s.back() = N;
  R o = zeros(s);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b ? b->v[size_t(n)] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += x.v[size_t(m * K + k)] * w.v[size_t(n * K + k)];
      o.v[size_t(m * N + n)] = acc;
    }
  return o;
}

inline R narrow(const R& x, int64_t dim, int64_t start, int64_t len) {
  Shape s = x.shape;
  s[size_t(dim)] = len;
  R o = zeros(s);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Shape idx = unravel(i, s);
    idx[size_t(dim)] += start;
    o.v[size_t(i)] = x.v[size_t(ravel(idx, x.shape))];
  }
  return o;
}

inline R cat(const std::vector<R>& xs, int64_t dim) {
  Shape s = xs[0].shape;
  s[size_t(dim)] = 0;
  for (const R& x : xs) s[size_t(dim)] += x.shape[size_t(dim)];
  R o = zeros(s);
  int64_t at = 0;
  for (const R& x : xs) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      Shape idx = unravel(i, x.shape);
      idx[size_t(dim)] += at;
      o.v[size_t(ravel(idx, s))] = x.v[size_t(i)];
    }
    at += x.shape[size_t(dim)];
  }
  return o;
}

inline R expand(const R& x, const Shape& s) {
  R o = zeros(s);
  for (int64_t i = 0; i < o.numel(); ++i) o.v[size_t(i)] = at_broadcast(x, unravel(i, s));
  return o;
}

inline R index_select(const R& x, int64_t dim, const std::vector<int64_t>& index) {
  Shape s = x.shape;
  s[size_t(dim)] = int64_t(index.size());
  R o = zeros(s);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Shape idx = unravel(i, s);
    idx[size_t(dim)] = index[size_t(idx[size_t(dim)])];
    o.v[size_t(i)] = x.v[size_t(ravel(idx, x.shape))];
  }
  return o;
}

inline R gather(const R& x, int64_t dim, const R& index) {
  R o = zeros(index.shape);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Shape idx = unravel(i, index.shape);
    idx[size_t(dim)] = int64_t(index.v[size_t(i)]);
    o.v[size_t(i)] = x.v[size_t(ravel(idx, x.shape))];
  }
  return o;
}

inline R scatter_add(const R& x, int64_t dim, const R& index, const R& src) {
  R o = x;
  for (int64_t i = 0; i < src.numel(); ++i) {
    Shape idx = unravel(i, index.shape);
    idx[size_t(dim)] = int64_t(index.v[size_t(i)]);
    o.v[size_t(ravel(idx, x.shape))] += src.v[size_t(i)];
  }
  return o;
}

// x (M, K) in consecutive groups of rows, weight (E, N, K): group e's rows times W_e^T.
inline R grouped_linear(const R& x, const R& w, const std::vector<int64_t>& sizes) {
  const int64_t K = x.size(1), N = w.size(1);
  R o = zeros({x.size(0), N});
  int64_t row = 0;
  for (size_t e = 0; e < sizes.size(); ++e)
    for (int64_t r = 0; r < sizes[e]; ++r, ++row)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += x.v[size_t(row * K + k)] * w.v[size_t((int64_t(e) * N + n) * K + k)];
        o.v[size_t(row * N + n)] = s;
      }
  return o;
}

// Per-row map over the last dim: f(row_in, row_out).
inline R rows(const R& x, const std::function<void(const double*, double*, int64_t)>& f) {
  R o = zeros(x.shape);
  const int64_t C = x.size(-1);
  for (int64_t r = 0; r < x.numel() / C; ++r) f(&x.v[size_t(r * C)], &o.v[size_t(r * C)], C);
  return o;
}

inline R layer_norm(const R& x, const R* w, const R* b, double eps) {
  return rows(x, [&](const double* in, double* out, int64_t C) {
    double m = 0, var = 0;
    for (int64_t i = 0; i < C; ++i) m += in[i];
    m /= double(C);
    for (int64_t i = 0; i < C; ++i) var += (in[i] - m) * (in[i] - m);
    var /= double(C);
    for (int64_t i = 0; i < C; ++i) {
      out[i] = (in[i] - m) / std::sqrt(var + eps);
      if (w) out[i] *= w->v[size_t(i)];
      if (b) out[i] += b->v[size_t(i)];
    }
  });
}

inline R rms_norm(const R& x, const R* w, double eps) {
  return rows(x, [&](const double* in, double* out, int64_t C) {
    double ss = 0;
    for (int64_t i = 0; i < C; ++i) ss += in[i] * in[i];
    const double r = 1.0 / std::sqrt(ss / double(C) + eps);
    for (int64_t i = 0; i < C; ++i) out[i] = in[i] * r * (w ? w->v[size_t(i)] : 1.0);
  });
}

inline R softmax(const R& x, bool log) {
  return rows(x, [&](const double* in, double* out, int64_t C) {
    double m = in[0];
    for (int64_t i = 1; i < C; ++i) m = std::max(m, in[i]);
    double s = 0;
    for (int64_t i = 0; i < C; ++i) s += std::exp(in[i] - m);
    for (int64_t i = 0; i < C; ++i)
      out[i] = log ? in[i] - m - std::log(s) : std::exp(in[i] - m) / s;
  });
}

inline R scalar(double v) {
  return R{{}, {v}};
}

inline R cross_entropy(const R& logits, const R& targets, int64_t ignore_index) {
  R lsm = softmax(logits, true);
  const int64_t V = logits.size(-1);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < targets.numel(); ++r) {
    const int64_t t = int64_t(targets.v[size_t(r)]);
    if (t == ignore_index) continue;
    total -= lsm.v[size_t(r * V + t)];
    count++;
  }
  return scalar(count ? total / double(count) : 0.0);
}

// x (B, H, T, D), rotate-half pairs (i, i + D/2), angle pos * freq[i] (default: theta^(-2i/D)).
inline R rope(const R& x, const std::vector<int64_t>& pos, double theta,
              std::vector<double> freq = {}) {
  for (int64_t i = int64_t(freq.size()); i < x.shape[3] / 2; ++i)
    freq.push_back(std::pow(theta, -2.0 * double(i) / double(x.shape[3])));
  R o = zeros(x.shape);
  const int64_t B = x.shape[0], H = x.shape[1], T = x.shape[2], D = x.shape[3], h = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t t = 0; t < T; ++t) {
        const size_t base = size_t(((b * H + hh) * T + t) * D);
        for (int64_t i = 0; i < h; ++i) {
          const double a = double(pos[size_t(t)]) * freq[size_t(i)];
          const double x1 = x.v[base + size_t(i)], x2 = x.v[base + size_t(i + h)];
          o.v[base + size_t(i)] = x1 * std::cos(a) - x2 * std::sin(a);
          o.v[base + size_t(i + h)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
  return o;
}

// Naive attention: scores, mask, causal (with a sliding window of `window` keys when > 0),
// softmax, weighted sum. q (B,Hq,Sq,D), k/v (B,Hkv,Skv,D).
inline R attention(const R& q, const R& k, const R& v, const R* mask, bool causal, double scale,
                   int64_t window = 0) {
  const int64_t B = q.shape[0], Hq = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Skv = k.shape[2], group = Hq / Hkv;
  R o = zeros(q.shape);
  std::vector<double> s(static_cast<size_t>(Skv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hk = h / group;
        double m = -INFINITY;
        for (int64_t j = 0; j < Skv; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d)
            acc += q.v[size_t(((b * Hq + h) * Sq + i) * D + d)] *
                   k.v[size_t(((b * Hkv + hk) * Skv + j) * D + d)];
          acc *= scale;
          if (mask) acc += at_broadcast(*mask, {b, h, i, j});
          if (causal && j > i + (Skv - Sq)) acc = -INFINITY;
          if (causal && window > 0 && j <= i + (Skv - Sq) - window) acc = -INFINITY;
          s[size_t(j)] = acc;
          m = std::max(m, acc);
        }
        double z = 0;
        for (int64_t j = 0; j < Skv; ++j) z += m == -INFINITY ? 0.0 : std::exp(s[size_t(j)] - m);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; ++j)
            if (z > 0)
              acc +=
                  std::exp(s[size_t(j)] - m) / z * v.v[size_t(((b * Hkv + hk) * Skv + j) * D + d)];
          o.v[size_t(((b * Hq + h) * Sq + i) * D + d)] = acc;
        }
      }
  return o;
}

}  // namespace ref
