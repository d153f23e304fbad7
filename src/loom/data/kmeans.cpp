#include "loom/data/kmeans.h"

#include <algorithm>
#include <limits>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom {

namespace {

double squared_distance(const float* a, const float* b, int64_t d) {
  double s = 0;
  for (int64_t j = 0; j < d; ++j) {
    const double t = double(a[j]) - double(b[j]);
    s += t * t;
  }
  return s;
}

// Assigns every point to its nearest centroid (the lowest index on a tie); returns how many
// points changed cluster and fills `distance` with each point's squared distance.
int64_t assign(const std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& c,
               int64_t k, std::vector<int64_t>& a, std::vector<double>& distance) {
  int64_t moved = 0;
#pragma omp parallel for reduction(+ : moved) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    double best_d = std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < k; ++j) {
      const double dist = squared_distance(&x[size_t(i * d)], &c[size_t(j * d)], d);
      if (dist < best_d) {
        best_d = dist;
        best = j;
      }
    }
    moved += a[size_t(i)] != best;
    a[size_t(i)] = best;
    distance[size_t(i)] = best_d;
  }
  return moved;
}

}  // namespace

KMeans kmeans(const std::vector<float>& x, int64_t n, int64_t d, int64_t k, uint64_t seed,
              int max_iterations) {
  LOOM_CHECK(d > 0 && k >= 1 && k <= n && int64_t(x.size()) == n * d)
      << "kmeans: " << k << " clusters of " << n << " points of " << d
      << " dimensions (needs 1 <= k <= n and n x d values, got " << x.size() << ")";
  KMeans r;
  r.centroids.resize(size_t(k * d));
  r.assignment.assign(size_t(n), -1);
  std::vector<double> distance(size_t(n), std::numeric_limits<double>::infinity());
  // k-means++: the first centre uniformly, each next one with probability proportional to a
  // point's squared distance to its nearest centre so far.
  const uint64_t stream = RngKey{seed, "kmeans", "init"}.hash();
  auto take = [&](int64_t j, int64_t i) {
    std::copy_n(&x[size_t(i * d)], d, &r.centroids[size_t(j * d)]);
    for (int64_t p = 0; p < n; ++p)
      distance[size_t(p)] =
          std::min(distance[size_t(p)], squared_distance(&x[size_t(p * d)], &x[size_t(i * d)], d));
  };
  take(0, std::min(n - 1, int64_t(uniform_at(stream, 0) * float(n))));
  for (int64_t j = 1; j < k; ++j) {
    double total = 0;
    for (double v : distance) total += v;
    double u = double(uniform_at(stream, uint64_t(j))) * total;
    int64_t pick = n - 1;
    for (int64_t p = 0; p < n; ++p)
      if ((u -= distance[size_t(p)]) < 0) {
        pick = p;
        break;
      }
    take(j, pick);
  }
  // Lloyd: assign, then move every centre to the mean of its points, until nothing moves.
  std::vector<double> sum(size_t(k * d));
  for (r.iterations = 1; r.iterations <= max_iterations; ++r.iterations) {
    const int64_t moved = assign(x, n, d, r.centroids, k, r.assignment, distance);
    std::fill(sum.begin(), sum.end(), 0.0);
    r.sizes.assign(size_t(k), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = r.assignment[size_t(i)];
      ++r.sizes[size_t(j)];
      for (int64_t t = 0; t < d; ++t) sum[size_t(j * d + t)] += double(x[size_t(i * d + t)]);
    }
    bool restarted = false;
    for (int64_t j = 0; j < k; ++j) {
      if (r.sizes[size_t(j)] == 0) {  // restart it at the worst-served point
        const int64_t far = std::max_element(distance.begin(), distance.end()) - distance.begin();
        std::copy_n(&x[size_t(far * d)], d, &r.centroids[size_t(j * d)]);
        distance[size_t(far)] = 0;
        restarted = true;
        continue;
      }
      for (int64_t t = 0; t < d; ++t)
        r.centroids[size_t(j * d + t)] = float(sum[size_t(j * d + t)] / double(r.sizes[size_t(j)]));
    }
    if (moved == 0 && !restarted) break;
  }
  r.iterations = std::min(r.iterations, max_iterations);
  // The final assignment, sizes and inertia, against the final centres.
  assign(x, n, d, r.centroids, k, r.assignment, distance);
  r.sizes.assign(size_t(k), 0);
  r.inertia = 0;
  for (int64_t i = 0; i < n; ++i) {
    ++r.sizes[size_t(r.assignment[size_t(i)])];
    r.inertia += distance[size_t(i)];
  }
  return r;
}

}  // namespace loom
