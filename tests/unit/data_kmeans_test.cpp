// k-means against what a Lloyd fixed point must satisfy, checked here in float64: every point
// on its nearest centre, every centre the mean of its points, the inertia their sum; and on
// well-separated blobs the partition that generated them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/kmeans.h"

namespace loom {
namespace {

std::vector<float> noise(int64_t n, int64_t d, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n * d));
  const uint64_t key = RngKey{seed, "kmeans_test", "x"}.hash();
  for (size_t i = 0; i < x.size(); ++i) x[i] = uniform_at(key, i) * 2 - 1;
  return x;
}

TEST(KMeans, RecoversSeparatedBlobs) {
  const int64_t per = 50, d = 5, k = 4;
  // Blob b: the cube [-1, 1]^5 around (10 b, -10 b, 0, 0, 0).
  std::vector<float> x = noise(per * k, d, 1);
  for (int64_t i = 0; i < per * k; ++i) {
    x[size_t(i * d)] += float(10 * (i / per));
    x[size_t(i * d + 1)] -= float(10 * (i / per));
  }
  const KMeans r = kmeans(x, per * k, d, k, 7);
  std::map<int64_t, std::set<int64_t>> clusters_of_blob;
  for (int64_t i = 0; i < per * k; ++i) clusters_of_blob[i / per].insert(r.assignment[size_t(i)]);
  std::set<int64_t> used;
  for (const auto& [blob, clusters] : clusters_of_blob) {
    ASSERT_EQ(clusters.size(), 1u) << "blob " << blob << " split over clusters";
    used.insert(*clusters.begin());
  }
  EXPECT_EQ(used.size(), size_t(k));
  for (int64_t s : r.sizes) EXPECT_EQ(s, per);
}

TEST(KMeans, EndsAtALloydFixedPoint) {
  const int64_t n = 300, d = 3, k = 5;
  const std::vector<float> x = noise(n, d, 2);
  const KMeans r = kmeans(x, n, d, k, 3);
  ASSERT_LT(r.iterations, 100) << "did not converge";
  auto dist = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t t = 0; t < d; ++t) {
      const double v = double(x[size_t(i * d + t)]) - double(r.centroids[size_t(j * d + t)]);
      s += v * v;
    }
    return s;
  };
  double inertia = 0;
  std::vector<std::vector<double>> mean(size_t(k), std::vector<double>(size_t(d), 0.0));
  std::vector<int64_t> count(size_t(k), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = r.assignment[size_t(i)];
    for (int64_t j = 0; j < k; ++j) ASSERT_LE(dist(i, a), dist(i, j) + 1e-9) << "point " << i;
    inertia += dist(i, a);
    ++count[size_t(a)];
    for (int64_t t = 0; t < d; ++t) mean[size_t(a)][size_t(t)] += x[size_t(i * d + t)];
  }
  for (int64_t j = 0; j < k; ++j) {
    ASSERT_GT(count[size_t(j)], 0);
    EXPECT_EQ(count[size_t(j)], r.sizes[size_t(j)]);
    for (int64_t t = 0; t < d; ++t)
      EXPECT_NEAR(r.centroids[size_t(j * d + t)],
                  mean[size_t(j)][size_t(t)] / double(count[size_t(j)]), 1e-5);
  }
  EXPECT_NEAR(r.inertia, inertia, 1e-6 * inertia);
}

TEST(KMeans, DeterministicOneClusterIsTheMeanAndBadInput) {
  const std::vector<float> x = noise(40, 2, 4);
  const KMeans a = kmeans(x, 40, 2, 3, 9), b = kmeans(x, 40, 2, 3, 9);
  EXPECT_EQ(a.assignment, b.assignment);
  EXPECT_EQ(a.centroids, b.centroids);
  const KMeans one = kmeans(x, 40, 2, 1, 0);
  double m = 0;
  for (int64_t i = 0; i < 40; ++i) m += x[size_t(2 * i)];
  EXPECT_NEAR(one.centroids[0], m / 40, 1e-6);
  EXPECT_THROW(kmeans(x, 40, 2, 41, 0), Error);
  EXPECT_THROW(kmeans(x, 40, 3, 2, 0), Error);
}

}  // namespace
}  // namespace loom
