// Writes a small Loom autoencoder run for tests/reference/autoencoder_reference.py to recompute
// in PyTorch: initial weights, a fixed batch of images and the posterior's noise, the step-0
// loss (train/recipes/autoencoder.h: reconstruction of a sampled latent plus the weighted KL)
// and gradients, and the losses of 20 AdamW steps on that batch (reference_driver.h).
//
//   reference_autoencoder_driver OUT_DIR    ->  OUT_DIR/cases.json, OUT_DIR/<case>/...
//
// Two cases, every all-zero parameter (the biases) redrawn so each carries its share: "l2"
// (squared error, one channel, 2 levels) and "l1" (absolute error, 2 channels so the channel
// order of pixel (un)shuffle and the convolutions is checked, 3 levels, a KL weight of 0.1).
#include <cstdio>
#include <exception>
#include <string>

#include "loom/train/recipes/autoencoder.h"
#include "reference_driver.h"

namespace {

using namespace loom;

constexpr uint64_t kSeed = 2468;

void write_case(const std::string& dir, bool l1) {
  models::AutoencoderConfig c;
  c.image_size = 16;
  c.channels = l1 ? 2 : 1;
  c.width = 4;
  c.downsamples = l1 ? 3 : 2;
  c.latent_channels = 3;
  c.l1 = l1;
  c.kl_weight = l1 ? 0.1 : 0.01;
  models::Autoencoder model(c);
  model.init_parameters(kSeed);
  reference::perturb_zero_parameters(model, kSeed);

  std::filesystem::create_directories(dir);
  const int64_t B = 3;
  Tensor x = Tensor::empty({B, c.channels, c.image_size, c.image_size});
  fill_uniform(x, RngKey{kSeed, "reference.x", ""}, 0, -1.0f, 1.0f);
  const int64_t s = c.latent_size();
  // The noise autoencoder_loss draws at step 0 for the batch from index 0.
  const Tensor noise =
      train::posterior_noise({B, c.latent_channels, s, s}, kSeed, 0, 0, cpu_device());
  write_npy(dir + "/x.npy", x);
  write_npy(dir + "/noise.npy", noise);
  auto loss = [&]() { return train::autoencoder_loss(model, x, kSeed, 0, 0).total; };

  Json meta = Json::object({{"model", "autoencoder"},
                            {"case", l1 ? "l1" : "l2"},
                            {"seed", kSeed},
                            {"config", Json::object({{"image_size", c.image_size},
                                                     {"channels", c.channels},
                                                     {"width", c.width},
                                                     {"downsamples", c.downsamples},
                                                     {"latent_channels", c.latent_channels},
                                                     {"l1", c.l1},
                                                     {"kl_weight", c.kl_weight}})},
                            {"batch", Json::object({{"x", "x.npy"}, {"noise", "noise.npy"}})}});
  // The absolute error's gradient jumps where a pixel's error changes sign: the f32 and f64
  // runs part after about 10 steps of the l1 case, so its curve is checked over 8.
  reference::TrainSpec train;
  if (l1) train.steps = 8;
  reference::write_reference_case(dir, model, meta, loss, train);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string out = argv[1];
    write_case(out + "/l2", false);
    write_case(out + "/l1", true);
    write_json_file(out + "/cases.json",
                    Json::object({{"model", "autoencoder"}, {"cases", Json::array({"l2", "l1"})}}));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reference_autoencoder_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
