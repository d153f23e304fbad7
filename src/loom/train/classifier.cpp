#include "loom/train/classifier.h"

#include <cstdio>
#include <filesystem>

#include "loom/checkpoint/json_file.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/atomic_file.h"
#include "loom/data/idx.h"
#include "loom/data/sampler.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"
#include "loom/optim/schedule.h"
#include "loom/train/config_file.h"
#include "loom/train/progress.h"

namespace loom::train {

namespace fs = std::filesystem;

ClassifierConfig load_classifier_config(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  ConfigFile f(path, overrides);
  ClassifierConfig c;
  const std::string kind = f.get_string("model", "kind", "vit_classifier");
  LOOM_CHECK(kind == "vit_classifier") << "config " << path << ": model.kind '" << kind
                                       << "' is not a classifier (expected vit_classifier)";
  auto& v = c.vit;
  v.image_size = f.get_int("model", "image_size", v.image_size);
  v.channels = f.get_int("model", "channels", v.channels);
  v.patch = f.get_int("model", "patch", v.patch);
  v.width = f.get_int("model", "width", v.width);
  v.depth = f.get_int("model", "depth", v.depth);
  v.heads = f.get_int("model", "heads", v.heads);
  v.mlp_ratio = f.get_double("model", "mlp_ratio", v.mlp_ratio);
  v.num_classes = f.get_int("model", "num_classes", v.num_classes);
  v.stem_channels = f.get_int("model", "stem_channels", v.stem_channels);
  v.validate();
  c.data_path = f.get_string("data", "path", c.data_path);
  c.out_dir = f.get_string("run", "out_dir", "runs") + "/" + f.get_string("run", "name", "fmnist_classifier");
  c.seed = uint64_t(f.get_int("run", "seed", 0));
  c.steps = f.get_int("train", "steps", c.steps);
  c.batch_size = f.get_int("train", "batch_size", c.batch_size);
  c.lr = f.get_double("train", "lr", c.lr);
  c.weight_decay = f.get_double("train", "weight_decay", c.weight_decay);
  c.warmup_steps = f.get_int("train", "warmup_steps", c.warmup_steps);
  c.augment = f.get_bool("train", "augment", c.augment);
  LOOM_CHECK(c.steps > 0 && c.batch_size > 0 && c.lr > 0 && c.warmup_steps >= 0)
      << "config " << path << ": train.steps, batch_size and lr must be positive";
  f.check_all_keys_used();
  c.resolved_toml = f.resolved();
  return c;
}

namespace {

// Flips every image of the batch horizontally whose Philox draw is below 0.5.
Tensor random_flip(const Tensor& images, uint64_t seed, int64_t step) {
  const int64_t B = images.size(0), W = images.size(3);
  Tensor u = Tensor::empty({B});
  fill_uniform(u, RngKey{seed, "classifier.flip", std::to_string(step)});
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
Tensor random_shift(const Tensor& images, uint64_t seed, int64_t step, int64_t max_shift) {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  Tensor u = Tensor::empty({B, 2});
  fill_uniform(u, RngKey{seed, "classifier.shift", std::to_string(step)});
  const std::vector<float> draw = to_vector(u);
  const std::vector<float> px = to_vector(images);
  std::vector<float> out(px.size(), -1.0f);
  const int64_t span = 2 * max_shift + 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t dy = std::min(int64_t(draw[size_t(2 * b)] * float(span)), span - 1) - max_shift;
    const int64_t dx = std::min(int64_t(draw[size_t(2 * b + 1)] * float(span)), span - 1) - max_shift;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y) {
        const int64_t sy = y - dy;
        if (sy < 0 || sy >= H) continue;
        for (int64_t x = 0; x < W; ++x) {
          const int64_t sx = x - dx;
          if (sx >= 0 && sx < W)
            out[size_t(((b * C + c) * H + y) * W + x)] = px[size_t(((b * C + c) * H + sy) * W + sx)];
        }
      }
  }
  return from_vector(out, images.shape());
}

}  // namespace

double classifier_accuracy(const models::Vit& model, const Tensor& images, const Tensor& labels) {
  NoGradGuard no_grad;
  const int64_t N = images.size(0), chunk = 500;
  const std::vector<int64_t> y = to_vector_i64(labels);
  int64_t correct = 0;
  for (int64_t at = 0; at < N; at += chunk) {
    const int64_t n = std::min(chunk, N - at);
    const std::vector<float> logits = to_vector(model.forward(narrow(images, 0, at, n)));
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

double train_classifier(const ClassifierConfig& c) {
  fs::create_directories(c.out_dir);
  ImageDataset train = fashion_mnist(c.data_path, true), test = fashion_mnist(c.data_path, false);
  models::Vit model(c.vit);
  model.init_parameters(c.seed);
  optim::AdamW opt(model.named_parameters(), {.lr = c.lr, .weight_decay = c.weight_decay});
  optim::LrSchedule schedule{.kind = "cosine", .lr = c.lr, .warmup_steps = c.warmup_steps,
                             .total_steps = c.steps, .min_lr_ratio = 0.02};
  Sampler sampler(train.images.size(0), c.batch_size, c.seed);
  Progress progress(c.out_dir + "/metrics.jsonl", c.steps, "img", c.batch_size, false);
  for (int64_t step = 0; step < c.steps; ++step) {
    const std::vector<int64_t> idx = sampler.next_batch();
    Tensor index = from_vector(idx, {int64_t(idx.size())});
    Tensor x, y;
    {
      NoGradGuard no_grad;
      x = index_select(train.images, 0, index);
      y = index_select(train.labels, 0, index);
    }
    if (c.augment) x = random_shift(random_flip(x, c.seed, step), c.seed, step, 2);
    Tensor loss = cross_entropy(model.forward(x), y);
    backward(loss);
    optim::clip_grad_norm(model.parameters(), 1.0);
    const double lr = schedule.lr_at(step);
    opt.step(lr);
    opt.zero_grad();
    if ((step + 1) % 100 == 0 || step + 1 == c.steps) progress.log(step, double(item(loss)), lr);
  }
  const double accuracy = classifier_accuracy(model, test.images, test.labels);
  std::printf("classifier: test accuracy %.2f%% on %lld images\n", 100.0 * accuracy,
              (long long)test.images.size(0));
  save_safetensors(c.out_dir + "/model.safetensors", state_dict(model));
  write_file_atomic(c.out_dir + "/config.toml", c.resolved_toml);
  write_json_file(c.out_dir + "/eval.json",
                  Json::object({{"test_accuracy", accuracy}, {"steps", c.steps}}));
  return accuracy;
}

std::unique_ptr<models::Vit> load_classifier(const std::string& dir) {
  const std::string config = dir + "/config.toml";
  LOOM_CHECK(fs::exists(config)) << "classifier: " << config << " not found (train one with "
                                 << "`loom train configs/fmnist_classifier.toml`)";
  ClassifierConfig c = load_classifier_config(config);
  auto model = std::make_unique<models::Vit>(c.vit);
  load_state_dict(*model, load_safetensors(dir + "/model.safetensors").by_name(),
                  dir + "/model.safetensors");
  return model;
}

}  // namespace loom::train
