#include "loom/train/recipes/autoencoder.h"

#include <cmath>
#include <cstdio>

#include "loom/autograd/node.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/canvas.h"
#include "loom/data/idx.h"
#include "loom/data/sampler.h"
#include "loom/diffusion/png.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/mmdit.h"

namespace loom::train {

namespace {

constexpr int64_t kChunk = 250;  // images per forward in evaluation

// 10 log10(4 / mse) per image of two (N, C, H, W) sets, the data range [-1, 1] being 2 wide.
std::vector<double> psnr_per_image(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = to_vector(a), y = to_vector(b);
  const int64_t N = a.size(0), per = a.numel() / N;
  std::vector<double> out(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    double se = 0;
    for (int64_t j = i * per; j < (i + 1) * per; ++j)
      se += double(x[size_t(j)] - y[size_t(j)]) * (x[size_t(j)] - y[size_t(j)]);
    out[size_t(i)] = 10.0 * std::log10(4.0 / std::max(se / double(per), 1e-12));
  }
  return out;
}

double average(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

}  // namespace

Tensor autoencoder_images(const Config& cfg, const ImageDataset& split, bool test, int64_t first,
                          int64_t count) {
  if (cfg.data.dataset == Dataset::Canvas)
    return make_canvases(split, uint64_t(cfg.data.canvas_seed), test, first, count).images;
  NoGradGuard no_grad;
  return contiguous(narrow(split.images, 0, first, count));
}

int64_t autoencoder_training_images(const Config& cfg, const ImageDataset& train) {
  return cfg.data.dataset == Dataset::Canvas ? cfg.data.canvases : train.images.size(0);
}

const char* autoencoder_images_name(const Config& cfg) {
  return cfg.data.dataset == Dataset::Canvas ? "canvases" : "images";
}

namespace {

class AutoencoderRecipe : public Recipe {
 public:
  explicit AutoencoderRecipe(const Config& cfg)
      : cfg_(cfg),
        source_(fashion_mnist(cfg.data.path, /*train=*/true)),
        model_(cfg.autoencoder()) {
    model_.init_parameters(cfg.run.seed);
  }

  nn::Module& model() override { return model_; }
  nn::ParallelPlan parallel_plan() const override { return autoencoder_plan(model_); }
  std::string describe() const override {
    const models::AutoencoderConfig& c = cfg_.autoencoder();
    const int64_t s = c.latent_size();
    return "autoencoder: " + std::to_string(model_.num_parameters()) + " parameters, " +
           std::to_string(c.channels) + " x " + std::to_string(c.image_size) + " x " +
           std::to_string(c.image_size) + " images <-> " + std::to_string(c.latent_channels) +
           " x " + std::to_string(s) + " x " + std::to_string(s) + " latents";
  }
  std::string describe_data() const override {
    if (cfg_.data.dataset != Dataset::Canvas)
      return "data: " + std::to_string(source_.images.size(0)) + " Fashion-MNIST images from " +
             cfg_.data.path;
    return "data: the images of " + std::to_string(cfg_.data.canvases) + " canvases (seed " +
           std::to_string(cfg_.data.canvas_seed) + ") of Fashion-MNIST items from " +
           cfg_.data.path;
  }

  void start(RunContext& run) override {
    run_ = &run;
    sampler_ = shuffled_sampler(autoencoder_training_images(cfg_, source_), cfg_, run);
  }
  void resume(const Json& state) override { resume_sampler(*sampler_, state); }

  Batch make_batch(const Slot&) override {
    const std::vector<int64_t> idx = sampler_->next_batch();
    std::vector<Tensor> images;
    if (cfg_.data.dataset == Dataset::Canvas)
      for (int64_t i : idx)
        images.push_back(make_canvas(source_, uint64_t(cfg_.data.canvas_seed), false, i).image);
    const Sampler::State next = sampler_->state();
    NoGradGuard no_grad;
    return {images.empty()
                ? index_select(source_.images, 0, from_vector(idx, {int64_t(idx.size())}))
                : stack(images, 0),
            Tensor(),
            Json::object({{"sampler_epoch", next.epoch}, {"sampler_position", next.position}})};
  }
  Tensor loss(const Batch& b, const Slot& s) override {
    return autoencoder_loss(model_, b.x, cfg_.run.seed, s.step, s.first).total;
  }

  Json evaluate(int64_t step) override {
    if (cfg_.eval.val_images == 0) return Json();
    const double psnr = held_out_psnr();
    std::printf("eval   %6lld | held-out PSNR %.2f dB (%lld test %s)\n", (long long)(step + 1),
                psnr, (long long)cfg_.eval.val_images, autoencoder_images_name(cfg_));
    return Json::object({{"psnr", psnr}});
  }

  Json finish(const RunSummary& summary) override {
    const double psnr = cfg_.eval.val_images > 0 ? held_out_psnr() : 0;
    const parallel::NamedTensors weights = trained_weights(run_->model);  // collective
    if (!run_->main) return Json();
    models::Autoencoder trained(cfg_.autoencoder());
    load_state_dict(trained, as_map(weights), "the trained weights");
    const std::string dir = cfg_.run_dir();
    save_safetensors(dir + "/model.safetensors", state_dict(trained));
    // The latents' statistics on as many training canvases as are held out (at least 256, at
    // most as many as there are).
    const int64_t n = std::min(std::max<int64_t>(cfg_.eval.val_images, 256),
                               autoencoder_training_images(cfg_, source_));
    const LatentStats stats =
        latent_stats(trained, autoencoder_images(cfg_, source_, /*test=*/false, 0, n));
    Json result = Json::object({{"step", summary.step},
                                {"latent_shift", stats.shift},
                                {"latent_scale", stats.scale},
                                {"train_seconds", summary.train_seconds}});
    std::printf("latents: shift %.5f, scale %.5f (from %lld training %s)\n", stats.shift,
                stats.scale, (long long)n, autoencoder_images_name(cfg_));
    write_reconstructions(trained, dir + "/reconstructions.png");
    if (cfg_.eval.val_images > 0) {
      const int64_t k = box_baseline_factor(cfg_.autoencoder());
      const double baseline = k > 0 ? average(box_baseline_psnr(held_out(), k)) : 0;
      result.set("psnr", psnr);
      result.set("val_images", cfg_.eval.val_images);
      if (k > 0) result.set("box_baseline_psnr", baseline);
      std::printf("eval: held-out PSNR %.2f dB on %lld test %s", psnr,
                  (long long)cfg_.eval.val_images, autoencoder_images_name(cfg_));
      if (k > 0)
        std::printf(" (as many values as a %lldx%lld box average: %.2f dB)", (long long)k,
                    (long long)k, baseline);
      std::printf(" -> %s/eval.json\n", dir.c_str());
    }
    write_json_file(dir + "/eval.json", result);
    return result;
  }

 private:
  const Tensor& held_out() {
    if (!val_.defined()) {
      const ImageDataset test = fashion_mnist(cfg_.data.path, /*train=*/false);
      LOOM_CHECK(cfg_.data.dataset == Dataset::Canvas ||
                 cfg_.eval.val_images <= test.images.size(0))
          << "eval.val_images " << cfg_.eval.val_images << ": the test split of " << cfg_.data.path
          << " holds " << test.images.size(0) << " images";
      val_ = autoencoder_images(cfg_, test, /*test=*/true, 0, cfg_.eval.val_images);
    }
    return val_;
  }
  // The mean PSNR of the held-out canvases, their chunks shared over the dp ranks (every rank
  // runs as many forwards: a sharded model gathers its weights in each).
  double held_out_psnr() {
    const Tensor& images = held_out();
    const int64_t n = images.size(0), chunks = (n + kChunk - 1) / kChunk, P = run_->dp.size();
    double sum = 0;
    for (int64_t round = 0; round < (chunks + P - 1) / P; ++round) {
      const int64_t c = round * P + run_->dp.rank();
      const int64_t at = c < chunks ? c * kChunk : 0, k = std::min(kChunk, n - at);
      const Tensor part = to_device(narrow(images, 0, at, k), model_.device());
      const std::vector<double> psnr = reconstruction_psnr(model_, part);
      if (c < chunks)
        for (double p : psnr) sum += p;
    }
    return sum_over(run_->dp, {sum})[0] / double(n);
  }
  // The first 8 held-out canvases over their reconstructions.
  void write_reconstructions(const models::Autoencoder& model, const std::string& path) {
    NoGradGuard no_grad;
    const Tensor originals =
        autoencoder_images(cfg_, fashion_mnist(cfg_.data.path, false), /*test=*/true, 0, 8);
    const Tensor rebuilt = model.decode(model.encode(originals).mean);
    const ImageGrid grid = image_grid(cat({originals, rebuilt}, 0), 2, 8);
    write_png(path, grid.pixels, grid.width, grid.height, grid.channels);
    std::printf("reconstructions: 8 held-out %s (top) and theirs (bottom) -> %s\n",
                autoencoder_images_name(cfg_), path.c_str());
  }

  const Config& cfg_;
  ImageDataset source_;  // Fashion-MNIST's training split: the training canvases' items
  models::Autoencoder model_;
  Tensor val_;  // the held-out canvases, made at the first evaluation
  RunContext* run_ = nullptr;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace

nn::ParallelPlan autoencoder_plan(const models::Autoencoder& model) {
  nn::ParallelPlan plan;
  plan.blocks = model.block_names();
  return plan;
}

std::unique_ptr<Recipe> make_autoencoder_recipe(const Config& config) {
  return std::make_unique<AutoencoderRecipe>(config);
}

AutoencoderLoss autoencoder_loss(const models::Autoencoder& model, const Tensor& images,
                                 uint64_t seed, int64_t step, int64_t first) {
  const models::Autoencoder::Posterior p = model.encode(images);  // (B, z, h, w) each
  const Tensor noise = posterior_noise(p.mean.shape(), seed, step, first, p.mean.device());
  const Tensor z = add(p.mean, mul(exp(mul_scalar(p.logvar, 0.5)), noise));
  const Tensor error = sub(model.decode(z), images);  // (B, C, H, W)
  const Tensor reconstruction =
      model.config.l1 ? mean(add(relu(error), relu(neg(error)))) : mean(mul(error, error));
  // KL(N(m, e^v) || N(0, 1)) = (m^2 + e^v - 1 - v) / 2 per value.
  const Tensor kl = mul_scalar(
      mean(sub(add(mul(p.mean, p.mean), exp(p.logvar)), add_scalar(p.logvar, 1.0))), 0.5);
  return {add(reconstruction, mul_scalar(kl, model.config.kl_weight)), reconstruction, kl};
}

Tensor posterior_noise(const Shape& shape, uint64_t seed, int64_t step, int64_t first,
                       Device device) {
  Tensor noise = Tensor::empty(shape, DType::F32, device);
  fill_normal(noise, RngKey{seed, "autoencoder.noise", std::to_string(step)},
              first * (noise.numel() / shape[0]));
  return noise;
}

std::vector<double> reconstruction_psnr(const models::Autoencoder& model, const Tensor& images) {
  NoGradGuard no_grad;
  AutocastGuard exact(DType::F32);
  std::vector<double> out;
  for (int64_t at = 0; at < images.size(0); at += kChunk) {
    const Tensor x = narrow(images, 0, at, std::min(kChunk, images.size(0) - at));
    const std::vector<double> part = psnr_per_image(model.decode(model.encode(x).mean), x);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

int64_t box_baseline_factor(const models::AutoencoderConfig& c) {
  const double k = double(int64_t(1) << c.downsamples) / std::sqrt(double(c.latent_channels));
  const int64_t whole = std::llround(k);
  return whole >= 1 && std::abs(k - double(whole)) < 1e-9 ? whole : 0;
}

std::vector<double> box_baseline_psnr(const Tensor& images, int64_t k) {
  const int64_t N = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  LOOM_CHECK(H % k == 0 && W % k == 0) << "box baseline: " << images.shape() << " by " << k;
  std::vector<float> px = to_vector(images);
  for (int64_t plane = 0; plane < N * C; ++plane)
    for (int64_t y = 0; y < H; y += k)
      for (int64_t x = 0; x < W; x += k) {
        float* p = px.data() + plane * H * W;
        double s = 0;
        for (int64_t dy = 0; dy < k; ++dy)
          for (int64_t dx = 0; dx < k; ++dx) s += p[(y + dy) * W + x + dx];
        for (int64_t dy = 0; dy < k; ++dy)
          for (int64_t dx = 0; dx < k; ++dx) p[(y + dy) * W + x + dx] = float(s / double(k * k));
      }
  return psnr_per_image(from_vector(px, images.shape()), images);
}

LatentStats latent_stats(const models::Autoencoder& model, const Tensor& images) {
  NoGradGuard no_grad;
  AutocastGuard exact(DType::F32);
  double s = 0, s2 = 0, n = 0;
  for (int64_t at = 0; at < images.size(0); at += kChunk) {
    const Tensor x = narrow(images, 0, at, std::min(kChunk, images.size(0) - at));
    for (float v : to_vector(model.encode(x).mean)) {
      s += v;
      s2 += double(v) * v;
      n += 1;
    }
  }
  const double m = s / n, var = std::max(s2 / n - m * m, 1e-12);
  return {m, 1.0 / std::sqrt(var)};
}

}  // namespace loom::train
