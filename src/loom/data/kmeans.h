// k-means (Lloyd's iterations from a k-means++ start) of n points of d dimensions: how the
// training set is split into the clusters that decentralized diffusion experts each train on
// in isolation. Deterministic for a seed (the start is drawn from Philox streams).
#pragma once
#include <cstdint>
#include <vector>

namespace loom {

struct KMeans {
  std::vector<float> centroids;     // (k, d)
  std::vector<int64_t> assignment;  // (n): the nearest centroid of each point
  std::vector<int64_t> sizes;       // (k)
  int iterations = 0;               // Lloyd iterations run (stopped when no point moved)
  double inertia = 0;               // sum of squared distances to the assigned centroids
};

// points: (n, d) row-major; 1 <= k <= n. An empty cluster is restarted at the point farthest
// from its centroid, so every cluster ends with at least one point.
KMeans kmeans(const std::vector<float>& points, int64_t n, int64_t d, int64_t k, uint64_t seed,
              int max_iterations = 100);

}  // namespace loom
