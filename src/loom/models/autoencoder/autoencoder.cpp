#include "loom/models/autoencoder/autoencoder.h"

#include "loom/ops/ops.h"

namespace loom::models {

void AutoencoderConfig::validate() const {
  LOOM_CHECK(channels > 0 && width > 0 && latent_channels > 0 && downsamples > 0)
      << "autoencoder: channels, width, latent_channels and downsamples must be positive";
  LOOM_CHECK(downsamples <= 6 && image_size > 0 && image_size % (int64_t(1) << downsamples) == 0)
      << "autoencoder: image_size " << image_size << " is not a multiple of 2^downsamples ("
      << downsamples << " downsamples)";
}

Tensor pixel_unshuffle(const Tensor& x) {
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  LOOM_CHECK(H % 2 == 0 && W % 2 == 0) << "pixel_unshuffle: odd size " << x.shape();
  // (B, H/2, 2, W/2, 2, C) -> (B, H/2, W/2, 2, 2, C)
  return reshape(permute(reshape(x, {B, H / 2, 2, W / 2, 2, C}), {0, 1, 3, 2, 4, 5}),
                 {B, H / 2, W / 2, 4 * C});
}

Tensor pixel_shuffle(const Tensor& x) {
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3) / 4;
  LOOM_CHECK(x.size(3) % 4 == 0) << "pixel_shuffle: channels not a multiple of 4: " << x.shape();
  // (B, H, W, 2, 2, C) -> (B, H, 2, W, 2, C)
  return reshape(permute(reshape(x, {B, H, W, 2, 2, C}), {0, 1, 3, 2, 4, 5}), {B, 2 * H, 2 * W, C});
}

ConvResBlock::ConvResBlock(int64_t width) {
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(width));
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(width, width, 3));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(width));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(width, width, 3));
}

Tensor ConvResBlock::forward(const Tensor& x) const {
  return call({x}, [this](const std::vector<Tensor>& in) {
    const Tensor h = conv1->forward(silu(norm1->forward(in[0])));
    return add(in[0], conv2->forward(silu(norm2->forward(h))));
  });
}

Autoencoder::Autoencoder(const AutoencoderConfig& c) : config(c) {
  c.validate();
  const int64_t L = c.downsamples;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = 4 * (l == 0 ? c.channels : c.level_width(l - 1));
    const std::string n = std::to_string(l);
    down.push_back(
        register_module("down." + n, std::make_shared<nn::Conv2d>(in, c.level_width(l), 3)));
    enc.push_back(
        register_module("encoder." + n, std::make_shared<ConvResBlock>(c.level_width(l))));
  }
  const int64_t top = c.level_width(L - 1);
  enc_norm = register_module("enc_norm", std::make_shared<nn::LayerNorm>(top));
  enc_out = register_module("enc_out", std::make_shared<nn::Conv2d>(top, 2 * c.latent_channels, 3));
  dec_in = register_module("dec_in", std::make_shared<nn::Conv2d>(c.latent_channels, top, 3));
  mid = register_module("mid", std::make_shared<ConvResBlock>(top));
  for (int64_t l = 0; l < L; ++l) {
    const int64_t out = 4 * (l == 0 ? c.channels : c.level_width(l - 1));
    const std::string n = std::to_string(l);
    dec.push_back(
        register_module("decoder." + n, std::make_shared<ConvResBlock>(c.level_width(l))));
    up_norm.push_back(
        register_module("up_norm." + n, std::make_shared<nn::LayerNorm>(c.level_width(l))));
    up.push_back(
        register_module("up." + n, std::make_shared<nn::Conv2d>(c.level_width(l), out, 3)));
  }
}

Autoencoder::Posterior Autoencoder::encode(const Tensor& x) const {
  const AutoencoderConfig& c = config;
  LOOM_CHECK(x.dim() == 4 && x.size(1) == c.channels && x.size(2) == c.image_size &&
             x.size(3) == c.image_size)
      << "autoencoder: expected images (B, " << c.channels << ", " << c.image_size << ", "
      << c.image_size << "), got " << x.shape();
  Tensor h = permute(x, {0, 2, 3, 1});  // (B, H, W, C)
  for (size_t l = 0; l < down.size(); ++l)
    h = enc[l]->forward(down[l]->forward(pixel_unshuffle(h)));  // (B, H / 2^(l+1), ., w_l)
  h = enc_out->forward(silu(enc_norm->forward(h)));             // (B, h, w, 2 z)
  const int64_t z = c.latent_channels;
  return {contiguous(permute(narrow(h, 3, 0, z), {0, 3, 1, 2})),
          contiguous(permute(narrow(h, 3, z, z), {0, 3, 1, 2}))};
}

Tensor Autoencoder::decode(const Tensor& latents) const {
  const AutoencoderConfig& c = config;
  const int64_t s = c.latent_size();
  LOOM_CHECK(latents.dim() == 4 && latents.size(1) == c.latent_channels && latents.size(2) == s &&
             latents.size(3) == s)
      << "autoencoder: expected latents (B, " << c.latent_channels << ", " << s << ", " << s
      << "), got " << latents.shape();
  Tensor h = mid->forward(dec_in->forward(permute(latents, {0, 2, 3, 1})));  // (B, h, w, top)
  for (size_t l = down.size(); l-- > 0;)
    h = pixel_shuffle(up[l]->forward(silu(up_norm[l]->forward(dec[l]->forward(h)))));
  return contiguous(permute(h, {0, 3, 1, 2}));  // (B, C, H, W)
}

std::vector<std::string> Autoencoder::block_names() const {
  std::vector<std::string> names;
  for (size_t l = 0; l < enc.size(); ++l) names.push_back("encoder." + std::to_string(l));
  names.push_back("mid");
  for (size_t l = 0; l < dec.size(); ++l) names.push_back("decoder." + std::to_string(l));
  return names;
}

}  // namespace loom::models
