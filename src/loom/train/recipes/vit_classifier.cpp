#include "loom/train/recipes/vit_classifier.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/idx.h"
#include "loom/data/sampler.h"
#include "loom/ops/ops.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// Flips every image of the batch horizontally whose Philox draw is below 0.5.
Tensor random_flip(const Tensor& images, uint64_t seed, const std::string& at) {
  const int64_t B = images.size(0), W = images.size(3);
  Tensor u = Tensor::empty({B});
  fill_uniform(u, RngKey{seed, "classifier.flip", at});
  const std::vector<float> draw = to_vector(u);
  std::vector<float> px = to_vector(images);
  const int64_t per = images.numel() / B;
  for (int64_t b = 0; b < B; ++b) {
    if (draw[size_t(b)] >= 0.5f) continue;
    float* img = px.data() + b * per;
    for (int64_t row = 0; row < per / W; ++row) std::reverse(img + row * W, img + (row + 1) * W);
  }
  return from_vector(px, images.shape());
}

// Moves every image by its own Philox-drawn (dy, dx) in [-max_shift, max_shift], filling the
// uncovered border with the background value (-1: black in the [-1, 1] data range).
Tensor random_shift(const Tensor& images, uint64_t seed, const std::string& at, int64_t max_shift) {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  Tensor u = Tensor::empty({B, 2});
  fill_uniform(u, RngKey{seed, "classifier.shift", at});
  const std::vector<float> draw = to_vector(u);
  const std::vector<float> px = to_vector(images);
  std::vector<float> out(px.size(), -1.0f);
  const int64_t span = 2 * max_shift + 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t dy = std::min(int64_t(draw[size_t(2 * b)] * float(span)), span - 1) - max_shift;
    const int64_t dx =
        std::min(int64_t(draw[size_t(2 * b + 1)] * float(span)), span - 1) - max_shift;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y) {
        const int64_t sy = y - dy;
        if (sy < 0 || sy >= H) continue;
        for (int64_t x = 0; x < W; ++x) {
          const int64_t sx = x - dx;
          if (sx >= 0 && sx < W)
            out[size_t(((b * C + c) * H + y) * W + x)] =
                px[size_t(((b * C + c) * H + sy) * W + sx)];
        }
      }
  }
  return from_vector(out, images.shape());
}

class VitClassifierRecipe : public Recipe {
 public:
  explicit VitClassifierRecipe(const Config& cfg)
      : cfg_(cfg),
        train_(fashion_mnist(cfg.data.path, /*train=*/true)),
        test_(fashion_mnist(cfg.data.path, /*train=*/false)),
        model_(cfg.vit()) {
    model_.init_parameters(cfg.run.seed);
  }

  nn::Module& model() override { return model_; }
  nn::ParallelPlan parallel_plan() const override { return vit_plan(model_); }
  std::string describe() const override {
    return "vit_classifier: " + std::to_string(model_.num_parameters()) + " parameters";
  }
  void start(RunContext& run) override {
    run_ = &run;
    sampler_ = shuffled_sampler(train_.images.size(0), cfg_, run);
  }
  void resume(const Json& state) override { resume_sampler(*sampler_, state); }

  Batch make_batch(const Slot& s) override {
    Batch b = sampled_batch(*sampler_, train_.images, train_.labels);
    // Random flips and shifts by up to 2 pixels, drawn for (seed, step, first sample).
    const std::string at = std::to_string(s.step) + " " + std::to_string(s.first);
    if (cfg_.train.augment)
      b.x = random_shift(random_flip(b.x, cfg_.run.seed, at), cfg_.run.seed, at, 2);
    return b;
  }
  Tensor loss(const Batch& b, const Slot&) override {
    return cross_entropy(model_.forward(b.x), b.y);
  }
  Json finish(const RunSummary& summary) override {
    const parallel::NamedTensors weights = trained_weights(run_->model);  // collective
    if (!run_->main) return Json();
    models::Vit trained(cfg_.vit());
    load_state_dict(trained, as_map(weights), "the trained weights");
    const double accuracy = classifier_accuracy(trained, test_.images, test_.labels);
    std::printf("classifier: test accuracy %.2f%% on %lld images\n", 100.0 * accuracy,
                (long long)test_.images.size(0));
    const std::string dir = cfg_.run_dir();
    save_safetensors(dir + "/model.safetensors", state_dict(trained));
    const Json result = Json::object({{"test_accuracy", accuracy}, {"steps", summary.step}});
    write_json_file(dir + "/eval.json", result);
    return result;
  }

 private:
  const Config& cfg_;
  ImageDataset train_, test_;
  models::Vit model_;
  RunContext* run_ = nullptr;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace

nn::ParallelPlan vit_plan(const models::Vit& model) {
  nn::ParallelPlan plan;
  for (size_t i = 0; i < model.blocks.size(); ++i)
    plan.blocks.push_back("blocks." + std::to_string(i));
  return plan;
}

std::unique_ptr<Recipe> make_vit_classifier_recipe(const Config& config) {
  return std::make_unique<VitClassifierRecipe>(config);
}

double classifier_accuracy(const models::Vit& model, const Tensor& images, const Tensor& labels,
                           double t, const Tensor& given) {
  NoGradGuard no_grad;
  const int64_t N = images.size(0), chunk = 500;
  const std::vector<int64_t> y = to_vector_i64(labels);
  int64_t correct = 0;
  for (int64_t at = 0; at < N; at += chunk) {
    const int64_t n = std::min(chunk, N - at);
    const Tensor times = t >= 0 ? full({n}, t) : Tensor();
    const Tensor told = given.defined() ? narrow(given, 0, at, n) : Tensor();
    const std::vector<float> logits =
        to_vector(model.forward(narrow(images, 0, at, n), times, told));
    const int64_t K = model.config.num_classes;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * K;
      correct += int64_t(std::max_element(row, row + K) - row) == y[size_t(at + i)];
    }
  }
  return double(correct) / double(N);
}

Tensor classifier_features(const models::Vit& model, const Tensor& images) {
  NoGradGuard no_grad;
  const int64_t N = images.size(0), chunk = 500;
  std::vector<Tensor> parts;
  for (int64_t at = 0; at < N; at += chunk)
    parts.push_back(model.features(narrow(images, 0, at, std::min(chunk, N - at))));
  return cat(parts, 0);
}

std::string find_classifier(const std::string& dir) {
  if (fs::path(dir).is_absolute() || fs::exists(fs::path(dir) / "config.toml")) return dir;
  // The installation's assets: beside the `loom` binary's folder (build/loom -> assets/).
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / dir;
    if (fs::exists(installed / "config.toml")) return installed.string();
  }
  return dir;
}

std::unique_ptr<models::Vit> load_classifier(const std::string& given) {
  const std::string dir = find_classifier(given);
  const std::string config = dir + "/config.toml";
  LOOM_CHECK(fs::exists(config)) << "classifier: " << config << " not found"
                                 << (fs::path(given).is_absolute()
                                         ? ""
                                         : " (nor in the installation beside the loom binary)")
                                 << "; train one with `loom train configs/fmnist_classifier.toml`";
  const Config c = load_config(config);
  LOOM_CHECK(c.model_kind == ModelKind::VitClassifier)
      << "classifier: " << config << " is of model.kind " << c.spec().name << ", not "
      << model_spec(ModelKind::VitClassifier).name;
  auto model = std::make_unique<models::Vit>(c.vit());
  load_state_dict(*model, load_safetensors(dir + "/model.safetensors").by_name(),
                  dir + "/model.safetensors");
  return model;
}

}  // namespace loom::train
