// The Fashion-MNIST classifier that judges generated images (class accuracy, and FID on its
// penultimate features): trained by the one loop from configs/fmnist_classifier.toml; its run
// directory keeps model.safetensors, config.toml and eval.json (test accuracy) beside the
// checkpoints, and is what `eval.classifier` names.
#pragma once
#include <memory>
#include <string>

#include "loom/models/vit/vit.h"
#include "loom/train/recipe.h"

namespace loom::train {

std::unique_ptr<Recipe> make_vit_classifier_recipe(const Config& config);
// Its blocks, for activation checkpointing and ZeRO's flat groups (data parallelism only).
nn::ParallelPlan vit_plan(const models::Vit& model);

// A trained classifier loaded from its directory. A relative `dir` is looked for from the working
// directory, then in the installation (the folder above the `loom` binary's: the repository for
// build/loom), so a run's eval.classifier = "assets/fmnist_classifier" is found from any directory.
std::string find_classifier(const std::string& dir);
std::unique_ptr<models::Vit> load_classifier(const std::string& dir);
// Top-1 accuracy of `model` on images (N, C, H, W) with labels (N), in batches; a
// time-conditioned model (the experts' router) at time t >= 0, told the class labels `given`
// (N) when it is label-conditioned.
double classifier_accuracy(const models::Vit& model, const Tensor& images, const Tensor& labels,
                           double t = -1, const Tensor& given = Tensor());
// Penultimate features (N, width), in batches, without recording a graph.
Tensor classifier_features(const models::Vit& model, const Tensor& images);

}  // namespace loom::train
