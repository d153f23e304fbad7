#include "loom/train/recipes/dit_clusters.h"

#include <cstdio>

#include "loom/data/kmeans.h"
#include "loom/data/npy.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

std::vector<int64_t> cluster_training_set(const ClusterOptions& o) {
  LOOM_CHECK(!o.out.empty() && o.out.size() > 4 && o.out.substr(o.out.size() - 4) == ".npy")
      << "cluster: --out must name an .npy file, got '" << o.out << "'";
  ImageDataset data = fashion_mnist(o.data_path, /*train=*/true);
  const int64_t N = o.images > 0 ? std::min(o.images, data.images.size(0)) : data.images.size(0);
  LOOM_CHECK(o.k >= 1 && o.k <= N) << "cluster: --k " << o.k << " must be in [1, " << N << "]";
  const auto classifier = load_classifier(o.classifier);
  const Tensor features = classifier_features(*classifier, narrow(data.images, 0, 0, N));  // (N, D)
  const int64_t D = features.size(1);
  const KMeans r = kmeans(to_vector(features), N, D, o.k, uint64_t(o.seed));
  write_npy(o.out, from_vector(r.assignment, {N}));
  const std::string centroids = o.out.substr(0, o.out.size() - 4) + "_centroids.npy";
  write_npy(centroids, from_vector(r.centroids, {o.k, D}));
  // What each cluster holds, by class: how the features split the data.
  const std::vector<int64_t> labels = to_vector_i64(narrow(data.labels, 0, 0, N));
  std::printf(
      "cluster: %lld training images, classifier features (%lld dims) of %s, k-means "
      "with k = %lld (%d iterations, inertia %.4g) -> %s, %s\n",
      (long long)N, (long long)D, o.classifier.c_str(), (long long)o.k, r.iterations, r.inertia,
      o.out.c_str(), centroids.c_str());
  for (int64_t j = 0; j < o.k; ++j) {
    std::vector<int64_t> by_class(size_t(data.num_classes), 0);
    for (int64_t i = 0; i < N; ++i)
      if (r.assignment[size_t(i)] == j) ++by_class[size_t(labels[size_t(i)])];
    std::printf("  cluster %lld: %6lld images; by class:", (long long)j,
                (long long)r.sizes[size_t(j)]);
    for (int64_t c = 0; c < data.num_classes; ++c)
      std::printf(" %lld", (long long)by_class[size_t(c)]);
    std::printf("\n");
  }
  return r.sizes;
}

ImageDataset cluster_subset(const ImageDataset& all, const std::string& path, int64_t k) {
  const Tensor t = read_npy(path);
  LOOM_CHECK(t.dtype() == DType::I64 && t.dim() == 1 && t.size(0) <= all.images.size(0))
      << "data.clusters " << path << ": expected one int64 cluster per training image (at most "
      << all.images.size(0) << "), got " << dtype_name(t.dtype()) << " " << t.shape();
  const std::vector<int64_t> a = to_vector_i64(t);
  std::vector<int64_t> mine;
  int64_t clusters = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    clusters = std::max(clusters, a[i] + 1);
    if (a[i] == k) mine.push_back(int64_t(i));
  }
  LOOM_CHECK(k >= 0 && k < clusters)
      << "data.cluster " << k << ": " << path << " has clusters 0.." << clusters - 1;
  LOOM_CHECK(!mine.empty()) << "data.cluster " << k << " of " << path << " holds no images";
  NoGradGuard no_grad;
  const Tensor index = from_vector(mine, {int64_t(mine.size())});
  return {index_select(all.images, 0, index), index_select(all.labels, 0, index), all.num_classes};
}

}  // namespace loom::train
