// Fréchet distance between two feature distributions (FID when the features come from an
// image classifier): |mu1 - mu2|^2 + Tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2), in f64.
#pragma once
#include <vector>

#include "loom/core/tensor.h"

namespace loom::diffusion {

struct FeatureStats {
  std::vector<double> mean;        // (d)
  std::vector<double> covariance;  // (d, d) row-major, unbiased (n - 1)
  int64_t dim = 0, count = 0;
};

FeatureStats feature_stats(const Tensor& features);  // (N, d), N >= 2
double frechet_distance(const FeatureStats& a, const FeatureStats& b);

// Eigen-decomposition of a symmetric (n, n) matrix by cyclic Jacobi rotations:
// values (n) and vectors (n, n, columns) such that A = V diag(values) V^T.
void symmetric_eigen(std::vector<double> a, int64_t n, std::vector<double>& values,
                     std::vector<double>& vectors);

}  // namespace loom::diffusion
