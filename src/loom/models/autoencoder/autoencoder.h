// A small convolutional KL autoencoder, the latent space of latent diffusion (Rombach et al.
// 2022): the encoder maps an image to a diagonal Gaussian over latents 2^downsamples times
// smaller per side, the decoder maps a latent back to an image. The resolution changes by pixel
// (un)shuffle (Shi et al. 2016: a 2 x 2 block of pixels becomes 4 channels, and back) next to a
// 3x3 convolution, so no convolution runs at the image's full resolution. Channels-last inside,
// images (B, C, H, W) outside. Plain single-device code.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/nn/layers.h"

namespace loom::models {

struct AutoencoderConfig {
  int64_t image_size = 64;
  int64_t channels = 1;
  int64_t width = 32;       // channels at the first level, doubled at each further one
  int64_t downsamples = 2;  // levels; each halves the side
  int64_t latent_channels = 4;
  // The training loss (the recipe's, read from [train]): the reconstruction error per pixel,
  // squared or absolute (l1), plus kl_weight x the KL divergence from N(0, 1) per latent value.
  double kl_weight = 1e-4;
  bool l1 = false;
  void validate() const;
  int64_t latent_size() const { return image_size >> downsamples; }
  int64_t level_width(int64_t level) const { return width << level; }
};

// (B, H, W, C) -> (B, H/2, W/2, 4C), each 2 x 2 block's pixels as channels (dy, dx, c).
Tensor pixel_unshuffle(const Tensor& x);
// Its inverse: (B, H, W, 4C) -> (B, 2H, 2W, C).
Tensor pixel_shuffle(const Tensor& x);

// x + conv2(silu(norm2(conv1(silu(norm1(x)))))), the norms LayerNorms over each pixel's channels.
class ConvResBlock : public nn::Module {
 public:
  explicit ConvResBlock(int64_t width);
  Tensor forward(const Tensor& x) const;  // (B, H, W, width), through call()
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
};

class Autoencoder : public nn::Module {
 public:
  explicit Autoencoder(const AutoencoderConfig& config);
  // The encoder's diagonal Gaussian: each (B, latent_channels, latent_size, latent_size).
  struct Posterior {
    Tensor mean, logvar;
  };
  Posterior encode(const Tensor& x) const;  // x (B, C, H, W)
  Tensor decode(const Tensor& z) const;     // (B, latent_channels, h, w) -> (B, C, H, W)
  // The residual blocks' names ("encoder.0", ..., "mid", "decoder.0", ...): the units
  // activation checkpointing and ZeRO-3 take.
  std::vector<std::string> block_names() const;
  const AutoencoderConfig config;

 private:
  // Encoder level l: unshuffle, down[l] (4 x the previous width -> level_width(l)), enc[l].
  std::vector<std::shared_ptr<nn::Conv2d>> down;
  std::vector<std::shared_ptr<ConvResBlock>> enc;
  std::shared_ptr<nn::LayerNorm> enc_norm;
  std::shared_ptr<nn::Conv2d> enc_out;  // -> 2 latent_channels: mean and log-variance
  // Decoder: dec_in, mid, then level l from the top: dec[l], up_norm[l], up[l] (-> 4 x the
  // width below, or 4 channels at level 0), shuffle.
  std::shared_ptr<nn::Conv2d> dec_in;
  std::shared_ptr<ConvResBlock> mid;
  std::vector<std::shared_ptr<ConvResBlock>> dec;
  std::vector<std::shared_ptr<nn::LayerNorm>> up_norm;
  std::vector<std::shared_ptr<nn::Conv2d>> up;
};

}  // namespace loom::models
