// The Fashion-MNIST classifier that judges generated images: trained by Loom from its own
// config (configs/fmnist_classifier.toml), stored as a small checkpoint directory.
#pragma once
#include <memory>
#include <string>

#include "loom/models/vit/vit.h"

namespace loom::train {

struct ClassifierConfig {
  models::VitConfig vit;
  std::string data_path = "/usr/share/datasets/fashion-mnist";
  std::string out_dir = "runs/fmnist_classifier";
  int64_t steps = 3000;
  int64_t batch_size = 128;
  double lr = 2e-3;
  double weight_decay = 0.05;
  int64_t warmup_steps = 100;
  uint64_t seed = 0;
  bool augment = true;  // random horizontal flips and shifts by up to 2 pixels
  std::string resolved_toml;
};

// Reads [model], [data], [train], [run] of a classifier config (unknown keys are errors).
ClassifierConfig load_classifier_config(const std::string& path,
                                        const std::vector<std::string>& overrides = {});
// Trains, then writes out_dir/{model.safetensors, config.toml, eval.json} (test accuracy).
double train_classifier(const ClassifierConfig& config);

// A trained classifier loaded from its directory.
std::unique_ptr<models::Vit> load_classifier(const std::string& dir);
// Top-1 accuracy of `model` on images (N, C, H, W) with labels (N), in batches.
double classifier_accuracy(const models::Vit& model, const Tensor& images, const Tensor& labels);
// Penultimate features (N, width), in batches, without recording a graph.
Tensor classifier_features(const models::Vit& model, const Tensor& images);

}  // namespace loom::train
