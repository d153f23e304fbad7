#include "loom/train/recipes/dit.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/idx.h"
#include "loom/data/image_files.h"
#include "loom/data/npy.h"
#include "loom/data/sampler.h"
#include "loom/diffusion/png.h"
#include "loom/ops/ops.h"
#include "loom/optim/ema.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/moe_balance.h"
#include "loom/train/progress.h"
#include "loom/train/recipes/dit_clusters.h"
#include "loom/train/recipes/latents.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// Each row's class, written to its left.
std::vector<int64_t> row_classes(int64_t classes, int64_t only_class = -1) {
  if (only_class >= 0) return {only_class};
  std::vector<int64_t> rows(size_t(classes), 0);
  for (int64_t c = 0; c < classes; ++c) rows[size_t(c)] = c;
  return rows;
}

Tensor sample_grid_labels(int64_t classes, int64_t per_class) {
  std::vector<int64_t> y;
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < per_class; ++i) y.push_back(c);
  return from_vector(y, {classes * per_class});
}

diffusion::VelocityFn velocity_of(const models::Dit& model) {
  return [&model](const Tensor& x, const Tensor& t, const Tensor& y) {
    return model.forward(x, t, y);
  };
}

}  // namespace

Tensor sample_dit_images(const models::Dit& model, const Tensor& labels,
                         const DitSampleOptions& o) {
  return sample_dit_images(velocity_of(model), model.config, labels, o);
}

Tensor sample_dit_images(const diffusion::VelocityFn& velocity, const models::DitConfig& c,
                         const Tensor& labels, const DitSampleOptions& o) {
  return sample_images(velocity, c.channels, c.image_size, c.num_classes, labels, o);
}

Tensor sample_model_space(const diffusion::VelocityFn& velocity, int64_t channels, int64_t size,
                          int64_t null_class, const Tensor& labels, const DitSampleOptions& o) {
  const int64_t N = labels.size(0), chunk = 100;
  std::vector<Tensor> parts;
  diffusion::SamplerConfig sc{o.steps, o.heun, o.cfg_scale, null_class, o.shift};
  // Sampling thousands of images takes minutes on a CPU: a line every 10 s says how far.
  const auto start = std::chrono::steady_clock::now();
  auto last_line = start;
  AutocastGuard autocast(o.precision);
  for (int64_t at = 0; at < N; at += chunk) {
    const int64_t n = std::min(chunk, N - at);
    Tensor x =
        diffusion::sample(velocity, {n, channels, size, size},
                          to_device(narrow(labels, 0, at, n), o.device), sc, o.seed + uint64_t(at));
    parts.push_back(x);
    const auto now = std::chrono::steady_clock::now();
    if (N > chunk && (now - last_line >= std::chrono::seconds(10) || at + n == N)) {
      last_line = now;
      const double s = std::chrono::duration<double>(now - start).count();
      std::printf("sampling: %lld/%lld images (%lld steps each) | %s elapsed | ETA %s\n",
                  (long long)(at + n), (long long)N, (long long)o.steps, format_duration(s).c_str(),
                  format_duration(s / double(at + n) * double(N - at - n)).c_str());
      std::fflush(stdout);
    }
  }
  NoGradGuard no_grad;
  return cat(parts, 0);
}

Tensor sample_images(const diffusion::VelocityFn& velocity, int64_t channels, int64_t size,
                     int64_t null_class, const Tensor& labels, const DitSampleOptions& o) {
  Tensor all = sample_model_space(velocity, channels, size, null_class, labels, o);
  if (o.latent) all = o.latent->decode(all);  // latents have no fixed range: clamp the images
  // Clamp to the data range.
  std::vector<float> v = to_vector(all);
  for (float& e : v) e = std::max(-1.0f, std::min(1.0f, e));
  return from_vector(v, all.shape());
}

double held_out_flow_loss(const diffusion::VelocityFn& velocity, const Tensor& images,
                          const Tensor& labels, int64_t n,
                          const diffusion::FlowMatchingConfig& flow, uint64_t seed,
                          dist::ProcessGroup& dp, Device device) {
  const int64_t chunk = 250, chunks = (n + chunk - 1) / chunk, P = dp.size();
  NoGradGuard no_grad;
  AutocastGuard exact(DType::F32);
  double sum = 0;
  for (int64_t round = 0; round < (chunks + P - 1) / P; ++round) {
    const int64_t c = round * P + dp.rank();
    const int64_t at = c < chunks ? c * chunk : 0, k = std::min(chunk, n - at);
    const Tensor loss =
        diffusion::flow_matching_loss(velocity, to_device(narrow(images, 0, at, k), device),
                                      to_device(narrow(labels, 0, at, k), device), flow, seed,
                                      /*step=*/-1, at);  // step -1: draws no training step uses
    if (c < chunks) sum += double(item(loss)) * double(k);
  }
  return sum_over(dp, {sum})[0] / double(n);
}

PieceState ema_piece_state(const optim::Ema& ema) {
  std::vector<Tensor> values;
  for (const auto& [name, t] : ema.named_weights()) values.push_back(t);
  return {"ema", values};
}

void follow_weights(optim::Ema& ema, parallel::ParallelModel& model, const Config& cfg,
                    int64_t step, bool updated) {
  model.settle();  // the EMA reads the master weights through tensors of its own
  if (updated && step < cfg.train.ema_start)
    ema.reset_to_params();
  else if (updated)
    ema.update(step - cfg.train.ema_start);
}

void write_samples(const diffusion::VelocityFn& velocity, const models::DitConfig& config,
                   const DitSampleOptions& o) {
  LOOM_CHECK(o.only_class < config.num_classes)
      << "sample: --class " << o.only_class << " is not one of the model's classes (0.."
      << config.num_classes - 1 << ")";
  const int64_t rows = o.only_class >= 0 ? 1 : config.num_classes;
  Tensor labels = o.only_class >= 0 ? full({o.per_class}, double(o.only_class), DType::I64)
                                    : sample_grid_labels(rows, o.per_class);
  Tensor images = sample_dit_images(velocity, config, labels, o);
  if (!o.png_path.empty()) {
    const ImageGrid grid = label_rows(image_grid(images, int(rows), int(o.per_class)),
                                      row_classes(rows, o.only_class), int(images.size(2)));
    write_png(o.png_path, grid.pixels, grid.width, grid.height, grid.channels);
  }
  if (!o.npy_prefix.empty()) {
    write_npy(o.npy_prefix + "_images.npy", images);
    write_npy(o.npy_prefix + "_labels.npy", labels);
  }
  std::printf("samples: %lld images (%s, %lld %s steps, cfg %.2f) -> %s%s%s\n",
              (long long)images.size(0),
              o.only_class >= 0 ? ("class " + std::to_string(o.only_class)).c_str()
                                : (std::to_string(o.per_class) + " per class").c_str(),
              (long long)o.steps, o.heun ? "Heun" : "Euler", o.cfg_scale, o.png_path.c_str(),
              !o.png_path.empty() && !o.npy_prefix.empty() ? " and " : "",
              o.npy_prefix.empty() ? "" : (o.npy_prefix + "_{images,labels}.npy").c_str());
}

namespace {

// The training set, or the one cluster of it this expert trains on.
ImageDataset training_data(const Config& cfg) {
  ImageDataset all = fashion_mnist(cfg.data.path, /*train=*/true);
  if (cfg.data.clusters.empty()) return all;
  return cluster_subset(all, cfg.data.clusters, cfg.data.cluster);
}

// A dataset of PNG files (data.dataset "images"), read as needed.
std::unique_ptr<ImageFiles> image_files(const std::string& path, const Config& cfg) {
  return std::make_unique<ImageFiles>(path, cfg.dit().channels, cfg.dit().image_size,
                                      cfg.dit().num_classes);
}

class DitRecipe : public Recipe {
 public:
  explicit DitRecipe(const Config& cfg)
      : cfg_(cfg),
        files_(cfg.data.dataset == Dataset::Images ? image_files(cfg.data.path, cfg) : nullptr),
        data_(files_ ? ImageDataset{} : training_data(cfg)),
        model_(cfg.dit()) {
    if (files_) {  // checked as it opened
      model_.init_parameters(cfg.run.seed);
      return;
    }
    // Latent diffusion: the images become their latents when the run starts (cached).
    if (!cfg.data.latent.empty()) latent_ = load_latent_space(cfg.data.latent);
    LOOM_CHECK(latent_ || (data_.images.size(1) == cfg.dit().channels &&
                           data_.images.size(2) == cfg.dit().image_size))
        << "dataset images " << data_.images.shape() << " do not match model.channels "
        << cfg.dit().channels << " and model.image_size " << cfg.dit().image_size;
    LOOM_CHECK(data_.num_classes <= cfg.dit().num_classes)
        << "dataset has " << data_.num_classes << " classes, model.num_classes is "
        << cfg.dit().num_classes;
    model_.init_parameters(cfg.run.seed);
  }

  nn::Module& model() override { return model_; }
  nn::ParallelPlan parallel_plan() const override { return model_.parallel_plan(); }
  std::string describe() const override {
    const int64_t total = model_.num_parameters();
    return "dit: " + parameter_count(total, cfg_.dit().active_parameters(total), cfg_.dit().moe) +
           ", " + std::to_string(cfg_.dit().tokens()) + " tokens per image";
  }
  std::string describe_data() const override {
    if (files_)
      return "data: " + std::to_string(files_->size()) + " PNG images in " + files_->source();
    if (latent_)
      return "data: " + std::to_string(data_.images.size(0)) +
             " Fashion-MNIST images as the latents of the autoencoder " + latent_->dir;
    if (cfg_.data.clusters.empty()) return "";
    return "data: cluster " + std::to_string(cfg_.data.cluster) + " of " + cfg_.data.clusters +
           ": " + std::to_string(data_.images.size(0)) + " training images";
  }

  void start(RunContext& run) override {
    run_ = &run;
    // Of the master weights this rank holds; samples use the gathered whole.
    ema_ = std::make_unique<optim::Ema>(run.model.piece_parameters(), cfg_.train.ema_decay);
    sampler_ = shuffled_sampler(files_ ? files_->size() : data_.images.size(0), cfg_, run);
    if (latent_) {
      const Tensor images = data_.images;
      data_.images = cached_latents(*latent_, "fashion_mnist", "training images", images.size(0),
                                    run.dp, [&](int64_t first, int64_t n) {
                                      NoGradGuard no_grad;
                                      return contiguous(narrow(images, 0, first, n));
                                    });
    }
  }
  std::vector<PieceState> piece_state() override { return {ema_piece_state(*ema_)}; }
  void resume(const Json& state) override { resume_sampler(*sampler_, state); }

  Batch make_batch(const Slot&) override {
    if (files_) {  // decoded as the sampler draws them
      const std::vector<int64_t> idx = sampler_->next_batch();
      auto [images, labels] = files_->read(idx);  // (B, C, H, W), (B)
      const Sampler::State next = sampler_->state();
      return {images, labels,
              Json::object({{"sampler_epoch", next.epoch}, {"sampler_position", next.position}})};
    }
    return sampled_batch(*sampler_, data_.images, data_.labels);
  }
  Tensor loss(const Batch& b, const Slot& s) override {
    // The noise and times of sample g of the step depend on (seed, step, g) alone.
    return diffusion::flow_matching_loss(velocity_of(model_), b.x, b.y, cfg_.flow, cfg_.run.seed,
                                         s.step, s.first);
  }
  parallel::PipelineStages pipeline_stages(const parallel::Pipeline& pipe,
                                           const std::vector<Batch>& batches,
                                           const std::vector<Slot>& slots) override {
    return conditioned_pipeline_stages(model_, pipe, batches, slots, cfg_, cfg_.dit().tokens(),
                                       cfg_.dit().width);
  }

  // The flow-matching loss of the trained weights (not the EMA: the loss they were trained on)
  // on the first eval.val_images test images (held_out_flow_loss).
  double held_out_loss() {
    if (!val_.images.defined()) val_ = held_out_images();
    return held_out_flow_loss(velocity_of(model_), val_.images, val_.labels,
                              std::min(cfg_.eval.val_images, val_.images.size(0)), cfg_.flow,
                              cfg_.run.seed, run_->dp, model_.device());
  }
  Json evaluate(int64_t step) override {
    if (!has_held_out()) return Json();
    const double loss = held_out_loss();
    std::printf("eval   %6lld | held-out loss %.5f (%lld test images)\n", (long long)(step + 1),
                loss, (long long)std::min(cfg_.eval.val_images, val_.images.size(0)));
    return Json::object({{"loss", loss}});
  }

  void after_step(int64_t step, bool updated) override {
    follow_weights(*ema_, run_->model, cfg_, step, updated);
  }

  std::vector<Image> images(int64_t step) override {
    // A grid from the EMA weights as they are now, one row per class, as at the end.
    const std::unique_ptr<models::Dit> ema_model = gathered_ema();
    if (!ema_model) return {};
    const Tensor labels = sample_grid_labels(cfg_.dit().num_classes, cfg_.sample.per_class);
    ImageGrid grid =
        label_rows(image_grid(sample_dit_images(*ema_model, labels, sample_options("")),
                              int(cfg_.dit().num_classes), int(cfg_.sample.per_class)),
                   row_classes(cfg_.dit().num_classes), int(cfg_.dit().image_size));
    char name[32];
    std::snprintf(name, sizeof name, "step-%06lld.png", (long long)(step + 1));
    fs::create_directories(cfg_.run_dir() + "/samples");
    const std::string path = cfg_.run_dir() + "/samples/" + name;
    write_png(path, grid.pixels, grid.width, grid.height, grid.channels);
    std::printf("samples %6lld | %s\n", (long long)(step + 1), path.c_str());
    return {{"samples", std::move(grid)}};
  }

  Json finish(const RunSummary& summary) override {
    // The held-out loss (all ranks: collective), unless the pipeline splits the model.
    const bool held_out = has_held_out();
    const double val_loss = held_out ? held_out_loss() : 0;
    if (held_out && run_->main)
      std::printf("final held-out loss at step %lld: %.5f (%lld test images)\n",
                  (long long)summary.step, val_loss,
                  (long long)std::min<int64_t>(cfg_.eval.val_images, val_.images.size(0)));
    const std::unique_ptr<models::Dit> ema = gathered_ema();
    if (!ema) return Json();  // samples and evaluation: the main rank alone
    Json result = Json::object({{"step", summary.step}});
    if (held_out) result.set("val_loss", val_loss);
    const models::Dit& ema_model = *ema;
    // Samples from the EMA weights: one row per class.
    const DitSampleOptions so = sample_options(cfg_.run_dir() + "/samples.png");
    write_samples(velocity_of(ema_model), cfg_.dit(), so);
    if (cfg_.eval.classifier.empty()) return held_out ? result : Json();
    const DitQuality q = evaluate_dit(velocity_of(ema_model), cfg_.dit(), cfg_.eval.classifier,
                                      cfg_.data.path, cfg_.eval.num_samples, so);
    const double images_per_second =
        double(summary.steps_run * cfg_.train.batch_size * cfg_.train.grad_accum) /
        std::max(summary.train_seconds, 1e-9);
    const Json quality = quality_json(q, so);  // items() refers into it: it must outlive the loop
    for (const auto& [key, value] : quality.items()) result.set(key, value);
    result.set("train_seconds", summary.train_seconds);
    result.set("images_per_second", images_per_second);
    write_json_file(cfg_.run_dir() + "/eval.json", result);
    std::printf(
        "eval: class accuracy %.1f%% of %lld samples, FID %.3f (real-data floor %.3f, "
        "ratio %.1f) -> %s/eval.json\n",
        100.0 * q.class_accuracy, (long long)q.samples, q.fid, q.fid_floor, q.fid / q.fid_floor,
        cfg_.run_dir().c_str());
    return result;
  }

 private:
  // The EMA weights, whole, as a model on the main rank (null elsewhere). Collective.
  std::unique_ptr<models::Dit> gathered_ema() {
    const parallel::NamedTensors weights = run_->model.gather_full(piece_state()[0].second);
    if (!run_->main) return nullptr;
    auto model = std::make_unique<models::Dit>(cfg_.dit());
    load_state_dict(*model, as_map(weights), "ema");
    nn::copy_selection_biases(model_, *model);  // not averaged: the live model's choices
    model->to(model_.device());                 // samples on the training device
    return model;
  }
  DitSampleOptions sample_options(const std::string& png_path) const {
    return {cfg_.sample.per_class,
            cfg_.sample.steps,
            cfg_.sample.cfg_scale,
            cfg_.sample.heun,
            cfg_.run.seed,
            png_path,
            "",
            model_.device(),
            cfg_.train.precision,
            -1,
            cfg_.flow.shift,
            latent_.get()};
  }
  // The held-out images: Fashion-MNIST's test split, or the first eval.val_images of
  // data.val_path (a dataset "images" without one has no held-out loss).
  bool has_held_out() const {
    return cfg_.eval.val_images > 0 && cfg_.parallel.topology.dims.pp == 1 &&
           (!files_ || !cfg_.data.val_path.empty());
  }
  ImageDataset held_out_images() const {
    if (latent_) {  // the first eval.val_images, as latents
      ImageDataset test = fashion_mnist(cfg_.data.path, /*train=*/false);
      const int64_t n = std::min(cfg_.eval.val_images, test.images.size(0));
      NoGradGuard no_grad;
      return {latent_->encode(narrow(test.images, 0, 0, n)), narrow(test.labels, 0, 0, n),
              test.num_classes};
    }
    if (!files_) return fashion_mnist(cfg_.data.path, /*train=*/false);
    const auto val = image_files(cfg_.data.val_path, cfg_);
    std::vector<int64_t> first(size_t(std::min(cfg_.eval.val_images, val->size())));
    for (size_t i = 0; i < first.size(); ++i) first[i] = int64_t(i);
    auto [images, labels] = val->read(first);
    return {images, labels, val->num_classes()};
  }

  const Config& cfg_;
  std::unique_ptr<ImageFiles> files_;    // data.dataset "images"; else data_ holds the images
  ImageDataset data_;                    // with model.latent: the images' latents from start() on
  std::unique_ptr<LatentSpace> latent_;  // model.latent's autoencoder; null: pixel space
  ImageDataset val_;                     // the test split, read at the first evaluation
  models::Dit model_;
  RunContext* run_ = nullptr;
  std::unique_ptr<optim::Ema> ema_;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace

std::unique_ptr<Recipe> make_dit_recipe(const Config& config) {
  return std::make_unique<DitRecipe>(config);
}

void sample_dit(const std::string& ckpt_dir, const DitSampleOptions& options) {
  const Config cfg = run_config_of(ckpt_dir, ModelKind::Dit, "sample");
  models::Dit model(cfg.dit());
  load_state_dict(model, as_map(CheckpointReader(ckpt_dir).read_all("ema")), ckpt_dir + " (ema)");
  load_selection_biases(model, ckpt_dir);
  DitSampleOptions o = options;
  o.precision = cfg.train.precision;
  o.shift = cfg.flow.shift;
  const std::unique_ptr<LatentSpace> latent =
      cfg.data.latent.empty() ? nullptr : load_latent_space(cfg.data.latent);
  o.latent = latent.get();
  write_samples(velocity_of(model), cfg.dit(), o);
}

}  // namespace loom::train
