// The autoencoder's spec (train/model_spec.h): a KL autoencoder trained on the canvases' images
// ([model], [data] and its [train] loss keys), its step's cost, and `loom eval` (held-out PSNR).
#include <cstdio>

#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/canvas.h"
#include "loom/data/idx.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/config.h"
#include "loom/train/config_read.h"
#include "loom/train/recipes/autoencoder.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/mmdit.h"
#include "loom/train/recipes/specs.h"

namespace loom::train {

namespace {

void read_autoencoder(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  auto& m = c.model.emplace<models::AutoencoderConfig>();
  m.image_size = f.get_int("model", "image_size", m.image_size);
  m.channels = f.get_int("model", "channels", m.channels);
  m.width = f.get_int("model", "width", m.width);
  m.downsamples = f.get_int("model", "downsamples", m.downsamples);
  m.latent_channels = f.get_int("model", "latent_channels", m.latent_channels);
  m.validate();

  // The canvases' images, or Fashion-MNIST's (the class-conditional DiT's latents).
  c.data.dataset = dataset_from_name(f.get_string("data", "dataset", "canvas"),
                                     {Dataset::Canvas, Dataset::FashionMnist},
                                     "config " + path + ": data.dataset", "autoencoder");
  const bool canvas = c.data.dataset == Dataset::Canvas;
  if (canvas)
    read_canvas_keys(f, c, "autoencoder");
  else
    c.data.path = f.get_string("data", "path", c.data.path);
  const int64_t size = canvas ? kCanvasSize : 28;
  LOOM_CHECK(m.image_size == size && m.channels == 1)
      << "config " << path << ": the " << (canvas ? "canvases" : "Fashion-MNIST images")
      << " are 1 x " << size << " x " << size << ", model.channels " << m.channels
      << " and model.image_size " << m.image_size << " do not match them";

  m.kl_weight = f.get_double("train", "kl_weight", m.kl_weight);
  const std::string reconstruction = f.get_string("train", "reconstruction", "l2");
  LOOM_CHECK(reconstruction == "l2" || reconstruction == "l1")
      << "config " << path << ": train.reconstruction \"" << reconstruction
      << "\" is not known (l2: squared error, l1: absolute error)";
  m.l1 = reconstruction == "l1";
  LOOM_CHECK(m.kl_weight >= 0) << "config " << path
                               << ": train.kl_weight must be non-negative, got " << m.kl_weight;

  c.eval.every = f.get_int("eval", "every", 0, kAnyStep);
  c.eval.val_images = f.get_int("eval", "val_images", c.eval.val_images);
  LOOM_CHECK(c.eval.every >= 0 && c.eval.val_images >= 0)
      << "config " << path << ": eval.every and eval.val_images must be non-negative";
}

// Convolutions only: data parallelism (DDP, ZeRO), no tensor, context or pipeline split.
ParallelFacts autoencoder_facts(const Config& c) {
  return {.depth = 2 * c.autoencoder().downsamples + 1};
}

// FLOPs per image: every 3x3 convolution, 2 x 9 x in x out per output pixel, at its resolution.
plan::StepShape autoencoder_step_shape(const Config& config, int64_t samples, int64_t) {
  const models::AutoencoderConfig& c = config.autoencoder();
  plan::StepShape s;
  s.name = config.run.name;
  s.unit = "img";
  s.batch = samples;
  double flops = 0, parameters = 0;
  auto conv = [&](double side, double in, double out) {
    flops += 2.0 * 9.0 * in * out * side * side;
    parameters += 9.0 * in * out;
  };
  for (int64_t l = 0; l < c.downsamples; ++l) {
    const double side = double(c.image_size >> (l + 1)), w = double(c.level_width(l));
    const double below = double(l == 0 ? c.channels : c.level_width(l - 1));
    conv(side, 4 * below, w);  // down
    conv(side, w, w);          // encoder block
    conv(side, w, w);
    conv(side, w, w);  // decoder block
    conv(side, w, w);
    conv(side, w, 4 * below);  // up
  }
  const double top = double(c.level_width(c.downsamples - 1)), z = double(c.latent_channels),
               side = double(c.latent_size());
  conv(side, top, 2 * z);  // enc_out
  conv(side, z, top);      // dec_in
  conv(side, top, top);    // mid
  conv(side, top, top);
  s.forward_flops = flops;
  s.parameters = parameters;
  s.sample_bytes = double(c.channels * c.image_size * c.image_size) * 4;
  s.not_counted = "the convolutions' activations";
  return s;
}

// `loom eval`: the held-out PSNR of a checkpoint's weights on the run's eval.val_images test
// canvases (1000 if it had none), and the box-average baseline's.
void eval_autoencoder_command(const EvalCall& call) {
  const Config cfg = run_config_of(call.checkpoint, ModelKind::Autoencoder, "eval");
  models::Autoencoder model(cfg.autoencoder());
  load_state_dict(model, as_map(CheckpointReader(call.checkpoint).read_all("model")),
                  call.checkpoint + " (model)");
  const int64_t n = cfg.eval.val_images > 0 ? cfg.eval.val_images : 1000;
  const Tensor images =
      autoencoder_images(cfg, fashion_mnist(cfg.data.path, false), /*test=*/true, 0, n);
  const std::vector<double> psnr = reconstruction_psnr(model, images);
  double mean = 0;
  for (double p : psnr) mean += p / double(n);
  Json out = Json::object({{"psnr", mean}, {"val_images", n}});
  const int64_t k = box_baseline_factor(cfg.autoencoder());
  double baseline = 0;
  if (k > 0) {
    for (double p : box_baseline_psnr(images, k)) baseline += p / double(n);
    out.set("box_baseline_psnr", baseline);
  }
  write_json_file(call.out, out);
  std::printf("%s: held-out PSNR %.2f dB on %lld test %s", call.checkpoint.c_str(), mean,
              (long long)n, autoencoder_images_name(cfg));
  if (k > 0)
    std::printf(" (a %lldx%lld box average: %.2f dB)", (long long)k, (long long)k, baseline);
  std::printf(" -> %s\n", call.out.c_str());
}

}  // namespace

extern const ModelSpec kAutoencoderSpec = {
    .kind = ModelKind::Autoencoder,
    .name = "autoencoder",
    .read = read_autoencoder,
    .parallel_facts = autoencoder_facts,
    .make_recipe = make_autoencoder_recipe,
    .bare_model = [](const Config& c) -> std::unique_ptr<nn::Module> {
      return std::make_unique<models::Autoencoder>(c.autoencoder());
    },
    .plan_of =
        [](const nn::Module& m) {
          return autoencoder_plan(static_cast<const models::Autoencoder&>(m));
        },
    .step_shape = autoencoder_step_shape,
    .eval = eval_autoencoder_command,
};

}  // namespace loom::train
