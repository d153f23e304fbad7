#include "loom/diffusion/fid.h"

#include <cmath>

#include "loom/ops/creation.h"

namespace loom::diffusion {

FeatureStats feature_stats(const Tensor& features) {
  LOOM_CHECK(features.dim() == 2 && features.size(0) >= 2)
      << "fid: features must be (N >= 2, d), got " << features.shape();
  const int64_t n = features.size(0), d = features.size(1);
  const std::vector<double> x = to_vector_f64(features);  // (n, d) row-major
  FeatureStats s;
  s.dim = d;
  s.count = n;
  s.mean.assign(size_t(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) s.mean[size_t(j)] += x[size_t(i * d + j)];
  for (double& m : s.mean) m /= double(n);
  s.covariance.assign(size_t(d * d), 0.0);        // (d, d); upper triangle, mirrored below
  std::vector<double> c(static_cast<size_t>(d));  // (d): one centred row
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) c[size_t(j)] = x[size_t(i * d + j)] - s.mean[size_t(j)];
    for (int64_t j = 0; j < d; ++j)
      for (int64_t k = j; k < d; ++k)
        s.covariance[size_t(j * d + k)] += c[size_t(j)] * c[size_t(k)];
  }
  for (int64_t j = 0; j < d; ++j)
    for (int64_t k = j; k < d; ++k) {
      const double v = s.covariance[size_t(j * d + k)] / double(n - 1);
      s.covariance[size_t(j * d + k)] = s.covariance[size_t(k * d + j)] = v;
    }
  return s;
}

void symmetric_eigen(std::vector<double> a, int64_t n, std::vector<double>& values,
                     std::vector<double>& vectors) {
  vectors.assign(size_t(n * n), 0.0);  // (n, n), eigenvectors as columns
  for (int64_t i = 0; i < n; ++i) vectors[size_t(i * n + i)] = 1.0;
  auto A = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * n + j)]; };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) (i == j ? total : off) += A(i, j) * A(i, j);
    if (off <= 1e-30 * (total + off) || off == 0) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (A(p, q) == 0.0) continue;
        // Rotation that zeroes A(p, q) (Golub & Van Loan, symmetric Schur decomposition).
        const double tau = (A(q, q) - A(p, p)) / (2.0 * A(p, q));
        const double t = (tau >= 0 ? 1.0 : -1.0) / (std::fabs(tau) + std::sqrt(1.0 + tau * tau));
        const double c = 1.0 / std::sqrt(1.0 + t * t), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // A = J^T A J: columns, then rows
          const double akp = A(k, p), akq = A(k, q);
          A(k, p) = c * akp - s * akq;
          A(k, q) = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double apk = A(p, k), aqk = A(q, k);
          A(p, k) = c * apk - s * aqk;
          A(q, k) = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          double& vkp = vectors[size_t(k * n + p)];
          double& vkq = vectors[size_t(k * n + q)];
          const double x = vkp, y = vkq;
          vkp = c * x - s * y;
          vkq = s * x + c * y;
        }
      }
  }
  values.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = A(i, i);
}

double frechet_distance(const FeatureStats& a, const FeatureStats& b) {
  LOOM_CHECK(a.dim == b.dim) << "fid: feature dims differ: " << a.dim << " vs " << b.dim;
  const int64_t d = a.dim;
  double mean_term = 0;
  for (int64_t i = 0; i < d; ++i)
    mean_term += (a.mean[size_t(i)] - b.mean[size_t(i)]) * (a.mean[size_t(i)] - b.mean[size_t(i)]);
  // sqrt(S1) = V diag(sqrt(max(l, 0))) V^T; then Tr sqrt(sqrt(S1) S2 sqrt(S1)) from the
  // eigenvalues of that symmetric PSD matrix.
  std::vector<double> l, v;  // S1 eigenvalues (d), eigenvectors (d, d)
  symmetric_eigen(a.covariance, d, l, v);
  std::vector<double> root(size_t(d * d), 0.0);  // (d, d): sqrt(S1)
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double s = 0;
      for (int64_t k = 0; k < d; ++k)
        s += v[size_t(i * d + k)] * std::sqrt(std::max(l[size_t(k)], 0.0)) * v[size_t(j * d + k)];
      root[size_t(i * d + j)] = s;
    }
  // tmp = sqrt(S1) S2, then m = tmp sqrt(S1): (d, d) each.
  std::vector<double> tmp(size_t(d * d), 0.0), m(size_t(d * d), 0.0);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t k = 0; k < d; ++k) {
      const double r = root[size_t(i * d + k)];
      for (int64_t j = 0; j < d; ++j) tmp[size_t(i * d + j)] += r * b.covariance[size_t(k * d + j)];
    }
  for (int64_t i = 0; i < d; ++i)
    for (int64_t k = 0; k < d; ++k) {
      const double t = tmp[size_t(i * d + k)];
      for (int64_t j = 0; j < d; ++j) m[size_t(i * d + j)] += t * root[size_t(k * d + j)];
    }
  for (int64_t i = 0; i < d; ++i)  // symmetrise rounding noise
    for (int64_t j = i + 1; j < d; ++j)
      m[size_t(i * d + j)] = m[size_t(j * d + i)] =
          0.5 * (m[size_t(i * d + j)] + m[size_t(j * d + i)]);
  std::vector<double> mu, mv;  // m's eigenvalues (d), eigenvectors (d, d)
  symmetric_eigen(m, d, mu, mv);
  double trace_sqrt = 0, trace_a = 0, trace_b = 0;
  for (double x : mu) trace_sqrt += std::sqrt(std::max(x, 0.0));
  for (int64_t i = 0; i < d; ++i) {
    trace_a += a.covariance[size_t(i * d + i)];
    trace_b += b.covariance[size_t(i * d + i)];
  }
  return mean_term + trace_a + trace_b - 2.0 * trace_sqrt;
}

}  // namespace loom::diffusion
