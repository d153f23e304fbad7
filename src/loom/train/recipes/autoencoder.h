// The KL autoencoder of latent diffusion (models/autoencoder/autoencoder.h), trained on the
// captioned canvases' images: its loss, its reconstruction quality (PSNR) and its latents'
// statistics, from which the diffusion models' latent scale comes. The run directory keeps
// model.safetensors, config.toml and eval.json (PSNR, latent shift and scale) beside the
// checkpoints.
#pragma once
#include <memory>
#include <string>

#include "loom/data/idx.h"
#include "loom/models/autoencoder/autoencoder.h"
#include "loom/train/recipe.h"

namespace loom::train {

std::unique_ptr<Recipe> make_autoencoder_recipe(const Config& config);

// The images an autoencoder of `cfg` trains on (data.dataset), [first, first + count) of a
// split as (count, 1, H, W) in [-1, 1]: the canvases (their items from `split`, Fashion-MNIST's
// split of the same name) or Fashion-MNIST's `split` itself; how many the training split has;
// and what the messages call them.
Tensor autoencoder_images(const Config& cfg, const ImageDataset& split, bool test, int64_t first,
                          int64_t count);
int64_t autoencoder_training_images(const Config& cfg, const ImageDataset& train);
const char* autoencoder_images_name(const Config& cfg);  // "canvases" or "images"
// Its residual blocks, for activation checkpointing and ZeRO's flat groups (data parallelism
// only).
nn::ParallelPlan autoencoder_plan(const models::Autoencoder& model);

// The training loss of images (B, C, H, W): the reconstruction error of a latent drawn from
// the posterior (its noise drawn for (seed, step) at the batch's global index `first`, so any
// split of the batch draws the same) plus kl_weight x the KL divergence per latent value.
struct AutoencoderLoss {
  Tensor total, reconstruction, kl;  // scalars
};
AutoencoderLoss autoencoder_loss(const models::Autoencoder& model, const Tensor& images,
                                 uint64_t seed, int64_t step, int64_t first);
// That noise: N(0, 1) of the posterior's shape (B, z, h, w), sample i's at global index first + i.
Tensor posterior_noise(const Shape& shape, uint64_t seed, int64_t step, int64_t first,
                       Device device);

// Each image's PSNR in dB, 10 log10(2^2 / MSE) for pixels in [-1, 1], of its reconstruction
// from the posterior's mean; in batches, without recording a graph.
std::vector<double> reconstruction_psnr(const models::Autoencoder& model, const Tensor& images);
// The same for the baseline that keeps as many values as the latent: a k x k box average of
// the image, repeated back to full size (k = 2^downsamples / sqrt(latent_channels); 0 when
// that is not a whole number).
int64_t box_baseline_factor(const models::AutoencoderConfig& c);
std::vector<double> box_baseline_psnr(const Tensor& images, int64_t k);

// The posterior means' mean and standard deviation over every latent value of `images`:
// latent diffusion trains on (mean - shift) x scale, of unit variance (scale = 1 / std).
struct LatentStats {
  double shift = 0, scale = 1;
};
LatentStats latent_stats(const models::Autoencoder& model, const Tensor& images);

}  // namespace loom::train
