// The latent space of a trained autoencoder (train/recipes/autoencoder.h), for the diffusion
// models that train in it (model.latent): its run directory's weights and its latents' shift
// and scale, and the training canvases' latents, encoded once into a cache beside the
// autoencoder and read whole by every run after.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "loom/data/idx.h"
#include "loom/dist/process_group.h"
#include "loom/models/autoencoder/autoencoder.h"
#include "loom/train/config.h"
#include "loom/train/recipes/autoencoder.h"

namespace loom::train {

// The config of the autoencoder whose run directory is `dir` (its config.toml); `what` names the
// key that points there in errors.
models::AutoencoderConfig autoencoder_config_of(const std::string& dir, const std::string& what);
// That the autoencoder in `dir` was trained on `data` (canvases, Fashion-MNIST): else an error.
void check_autoencoder_data(const std::string& dir, Dataset data, const std::string& what);

struct LatentSpace {
  std::string dir;  // the autoencoder's run directory
  std::unique_ptr<models::Autoencoder> model;
  LatentStats stats;         // from its eval.json
  std::string weights_hash;  // XXH64 of its model.safetensors: which latents a cache holds
  // Images (N, C, H, W) -> (mean - shift) x scale of the posterior (N, z, h, w); and back to
  // images. In chunks, without recording a graph, on the host (the autoencoder's device)
  // whatever device the input is on.
  Tensor encode(const Tensor& images) const;
  Tensor decode(const Tensor& latents) const;
};
// The finished run in `dir` (model.safetensors, config.toml, eval.json): one clear error for
// each missing piece.
std::unique_ptr<LatentSpace> load_latent_space(const std::string& dir);

// The latents (count, z, h, w) of training canvases [0, count) of `seed` (items from `source`).
// Cached in DIR/latents/<weights hash>-<seed>/ as shards of 4096 canvases: the dp ranks encode
// the missing shards between them (each written under a temporary name and renamed into place,
// so a run cut short leaves whole shards, and the next run encodes only the rest), then every
// rank reads them all. Collective over `dp`.
Tensor cached_canvas_latents(const LatentSpace& space, const ImageDataset& source, uint64_t seed,
                             int64_t count, dist::ProcessGroup& dp);
// The same for any `count` images: images(first, n) gives [first, first + n); `data` names
// them in the cache's directory, `what` in the line it prints ("training images").
Tensor cached_latents(const LatentSpace& space, const std::string& data, const std::string& what,
                      int64_t count, dist::ProcessGroup& dp,
                      const std::function<Tensor(int64_t first, int64_t n)>& images);

}  // namespace loom::train
