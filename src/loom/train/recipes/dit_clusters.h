// Decentralized diffusion experts, step one (McAllister et al. 2025): the training set split
// into K clusters, so that K DiTs can each train on one in complete isolation (separate runs,
// `data.clusters` and `data.cluster`, nothing exchanged). The features clustered are the
// shipped Fashion-MNIST classifier's penultimate ones: like the DINOv2 features of the paper,
// they come from an encoder trained apart from the generator and place images by what they
// show rather than by their pixels, so a cluster holds images a single expert can learn well.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/idx.h"

namespace loom::train {

struct ClusterOptions {
  std::string data_path = "/usr/share/datasets/fashion-mnist";
  std::string classifier = "assets/fmnist_classifier";
  int64_t k = 4;
  int64_t images = 0;  // > 0: only the first N training images
  int64_t seed = 0;    // of the k-means start
  std::string out;     // the assignments (N int64 .npy); beside it <stem>_centroids.npy
};

// Clusters the training images and writes the files; returns each cluster's size.
std::vector<int64_t> cluster_training_set(const ClusterOptions& options);

// The images of cluster `k` per the assignments file (an .npy of int64, one per image of the
// first N of `all`; N <= the dataset's size).
ImageDataset cluster_subset(const ImageDataset& all, const std::string& clusters_path, int64_t k);

}  // namespace loom::train
