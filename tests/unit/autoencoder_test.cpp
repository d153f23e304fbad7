// The autoencoder's pieces around its network (whose forward and gradients are checked against
// PyTorch in tests/reference/autoencoder_reference.py):
//  - pixel (un)shuffle move each pixel where the (dy, dx, c) channel order says, and invert each
//    other;
//  - the loss is the reconstruction error plus kl_weight x the closed-form KL, computed here in
//    float64 from the encoder's outputs; its noise is drawn per sample, so a batch split in two
//    at its global index gives the same losses (what data parallelism needs);
//  - PSNR and the box-average baseline on images with known answers; the baseline's factor;
//  - the latent statistics standardise the latents.
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "loom/core/rng.h"
#include "loom/models/autoencoder/autoencoder.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/autoencoder.h"

namespace loom {
namespace {

models::AutoencoderConfig small() {
  models::AutoencoderConfig c;
  c.image_size = 16;
  c.channels = 2;
  c.width = 4;
  c.downsamples = 2;
  c.latent_channels = 3;
  c.kl_weight = 0.25;
  return c;
}

Tensor images(int64_t n, const models::AutoencoderConfig& c, const std::string& name) {
  Tensor x = Tensor::empty({n, c.channels, c.image_size, c.image_size});
  fill_uniform(x, RngKey{7, "test.images", name}, 0, -1.0f, 1.0f);
  return x;
}

TEST(PixelShuffle, MovesEachPixelToItsChannelAndBack) {
  const int64_t B = 2, H = 4, W = 6, C = 3;
  std::vector<float> v(size_t(B * H * W * C));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  const Tensor x = from_vector(v, {B, H, W, C});
  const Tensor u = models::pixel_unshuffle(x);
  ASSERT_EQ(u.shape(), (Shape{B, H / 2, W / 2, 4 * C}));
  const std::vector<float> got = to_vector(u);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x0 = 0; x0 < W; ++x0)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t channel = ((y % 2) * 2 + x0 % 2) * C + c;  // (dy, dx, c)
          const size_t at = size_t(((b * (H / 2) + y / 2) * (W / 2) + x0 / 2) * 4 * C + channel);
          ASSERT_EQ(got[at], v[size_t(((b * H + y) * W + x0) * C + c)]);
        }
  EXPECT_EQ(to_vector(models::pixel_shuffle(u)), v);
}

TEST(AutoencoderLoss, IsTheReconstructionPlusTheWeightedClosedFormKl) {
  const models::AutoencoderConfig c = small();
  models::Autoencoder model(c);
  model.init_parameters(11);
  const Tensor x = images(3, c, "loss");
  const train::AutoencoderLoss loss = train::autoencoder_loss(model, x, 5, 2, 0);
  const models::Autoencoder::Posterior p = model.encode(x);
  const std::vector<float> m = to_vector(p.mean), v = to_vector(p.logvar);
  double kl = 0;
  for (size_t i = 0; i < m.size(); ++i)
    kl += 0.5 * (double(m[i]) * m[i] + std::exp(double(v[i])) - 1.0 - v[i]);
  kl /= double(m.size());
  EXPECT_NEAR(item(loss.kl), kl, 1e-6 * kl);
  EXPECT_NEAR(item(loss.total), item(loss.reconstruction) + 0.25 * kl, 1e-6);
  // The reconstruction of the drawn latent, squared error per pixel.
  const Tensor z = add(p.mean, mul(exp(mul_scalar(p.logvar, 0.5)),
                                   train::posterior_noise(p.mean.shape(), 5, 2, 0, cpu_device())));
  const std::vector<float> r = to_vector(model.decode(z)), px = to_vector(x);
  double se = 0;
  for (size_t i = 0; i < r.size(); ++i) se += (double(r[i]) - px[i]) * (double(r[i]) - px[i]);
  EXPECT_NEAR(item(loss.reconstruction), se / double(r.size()), 1e-6);
}

TEST(AutoencoderLoss, AnyBatchSplitDrawsTheSameNoise) {
  const models::AutoencoderConfig c = small();
  models::Autoencoder model(c);
  model.init_parameters(11);
  const Tensor x = images(4, c, "split");
  const double whole = item(train::autoencoder_loss(model, x, 5, 9, 0).reconstruction);
  const double a = item(train::autoencoder_loss(model, narrow(x, 0, 0, 2), 5, 9, 0).reconstruction);
  const double b = item(train::autoencoder_loss(model, narrow(x, 0, 2, 2), 5, 9, 2).reconstruction);
  EXPECT_NEAR(whole, 0.5 * (a + b), 1e-6);
  // Another step draws other noise.
  EXPECT_NE(whole, item(train::autoencoder_loss(model, x, 5, 10, 0).reconstruction));
}

TEST(Psnr, BoxBaselineOfACheckerboardIsTenLogTenOfFour) {
  // +-1 in a checkerboard: every 2x2 block averages to 0, so every pixel is off by 1 (MSE 1).
  const int64_t S = 8;
  std::vector<float> v(size_t(2 * S * S));
  for (int64_t i = 0; i < 2 * S * S; ++i) v[size_t(i)] = ((i / S) + (i % S)) % 2 ? 1.0f : -1.0f;
  const std::vector<double> psnr = train::box_baseline_psnr(from_vector(v, {2, 1, S, S}), 2);
  ASSERT_EQ(psnr.size(), 2u);
  for (double p : psnr) EXPECT_NEAR(p, 10.0 * std::log10(4.0), 1e-6);
  // Constant 2x2 blocks survive exactly (capped at MSE 1e-12: 126 dB).
  std::vector<float> blocks(size_t(S * S));
  for (int64_t i = 0; i < S * S; ++i) blocks[size_t(i)] = float((i / S / 2 + i % S / 2) % 3) - 1;
  EXPECT_GT(train::box_baseline_psnr(from_vector(blocks, {1, 1, S, S}), 2)[0], 120);
}

TEST(Psnr, BoxBaselineKeepsAsManyValuesAsTheLatent) {
  models::AutoencoderConfig c;
  c.downsamples = 2;
  c.latent_channels = 4;  // 16 x 16 x 4 values = a 32 x 32 image: 2 x 2 boxes
  EXPECT_EQ(train::box_baseline_factor(c), 2);
  c.downsamples = 3;
  EXPECT_EQ(train::box_baseline_factor(c), 4);
  c.latent_channels = 16;
  EXPECT_EQ(train::box_baseline_factor(c), 2);
  c.latent_channels = 3;  // not a square: no baseline
  EXPECT_EQ(train::box_baseline_factor(c), 0);
}

TEST(LatentStats, StandardiseTheLatents) {
  const models::AutoencoderConfig c = small();
  models::Autoencoder model(c);
  model.init_parameters(11);
  const Tensor x = images(6, c, "stats");
  const train::LatentStats s = train::latent_stats(model, x);
  double sum = 0, sum2 = 0;
  const std::vector<float> m = to_vector(model.encode(x).mean);
  for (float v : m) {
    const double z = (double(v) - s.shift) * s.scale;
    sum += z;
    sum2 += z * z;
  }
  const double n = double(m.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-5);
  EXPECT_NEAR(sum2 / n - (sum / n) * (sum / n), 1.0, 1e-4);
}

TEST(Autoencoder, NamesAWrongShape) {
  const models::AutoencoderConfig c = small();
  models::Autoencoder model(c);
  expect_error(
      [&] {
        model.encode(Tensor::empty({1, 1, 16, 16}));
      },
      {"autoencoder: expected images (B, 2, 16, 16)"});
  expect_error(
      [&] {
        model.decode(Tensor::empty({1, 3, 8, 8}));
      },
      {"autoencoder: expected latents (B, 3, 4, 4)"});
  models::AutoencoderConfig odd = c;
  odd.image_size = 18;
  expect_error([&] { odd.validate(); }, {"image_size 18 is not a multiple of 2^downsamples"});
}

}  // namespace
}  // namespace loom
