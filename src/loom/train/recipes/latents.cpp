#include "loom/train/recipes/latents.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/autograd/node.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/hash.h"
#include "loom/core/json_file.h"
#include "loom/ops/ops.h"
#include "loom/train/config.h"
#include "loom/train/recipe.h"
#include "loom/train/recipes/mmdit.h"
#include "loom/train/recipes/shard_cache.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kShard = 4096;  // canvases per cache file
constexpr int64_t kChunk = 250;   // images per forward

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

namespace {

Config autoencoder_run_config(const std::string& dir, const std::string& what) {
  const std::string config = dir + "/config.toml";
  LOOM_CHECK(fs::exists(config)) << what << ": " << config
                                 << " not found (name the run directory of a trained autoencoder)";
  Config c = load_config(config);
  LOOM_CHECK(c.model_kind == ModelKind::Autoencoder)
      << what << ": " << dir << " holds a run of model.kind " << c.spec().name
      << ", not an autoencoder";
  return c;
}

}  // namespace

models::AutoencoderConfig autoencoder_config_of(const std::string& dir, const std::string& what) {
  return autoencoder_run_config(dir, what).autoencoder();
}

void check_autoencoder_data(const std::string& dir, Dataset data, const std::string& what) {
  const Dataset trained = autoencoder_run_config(dir, what).data.dataset;
  LOOM_CHECK(trained == data) << what << ": the autoencoder in " << dir << " was trained on "
                              << name_of(trained) << " images, this model trains on "
                              << name_of(data) << " images";
}

std::unique_ptr<LatentSpace> load_latent_space(const std::string& dir) {
  auto space = std::make_unique<LatentSpace>();
  space->dir = dir;
  space->model = std::make_unique<models::Autoencoder>(autoencoder_config_of(dir, "model.latent"));
  const std::string weights = dir + "/model.safetensors", eval = dir + "/eval.json";
  LOOM_CHECK(fs::exists(weights) && fs::exists(eval))
      << "model.latent: " << dir << " has no model.safetensors and eval.json (they are written "
      << "when the autoencoder's run ends)";
  load_state_dict(*space->model, load_safetensors(weights).by_name(), weights);
  const Json e = read_json_file(eval);
  space->stats = {e.at("latent_shift").as_double(), e.at("latent_scale").as_double()};
  const std::string bytes = file_bytes(weights);
  space->weights_hash = xxh64_hex(bytes.data(), bytes.size());
  return space;
}

Tensor LatentSpace::encode(const Tensor& on_any_device) const {
  NoGradGuard no_grad;
  AutocastGuard exact(DType::F32);
  const Tensor images = to_device(on_any_device, cpu_device());  // where the autoencoder is
  std::vector<Tensor> parts;
  for (int64_t at = 0; at < images.size(0); at += kChunk) {
    const Tensor x = narrow(images, 0, at, std::min(kChunk, images.size(0) - at));
    parts.push_back(mul_scalar(add_scalar(model->encode(x).mean, -stats.shift), stats.scale));
  }
  return cat(parts, 0);
}

Tensor LatentSpace::decode(const Tensor& on_any_device) const {
  NoGradGuard no_grad;
  AutocastGuard exact(DType::F32);
  const Tensor latents = to_device(on_any_device, cpu_device());  // where the autoencoder is
  std::vector<Tensor> parts;
  for (int64_t at = 0; at < latents.size(0); at += kChunk) {
    const Tensor z = narrow(latents, 0, at, std::min(kChunk, latents.size(0) - at));
    parts.push_back(model->decode(add_scalar(mul_scalar(z, 1.0 / stats.scale), stats.shift)));
  }
  return cat(parts, 0);
}

Tensor cached_latents(const LatentSpace& space, const std::string& data, const std::string& what,
                      int64_t count, dist::ProcessGroup& dp,
                      const std::function<Tensor(int64_t first, int64_t n)>& images) {
  const ShardCache cache{
      space.dir + "/latents/" + space.weights_hash + "-" + data, count, kShard, {""}};
  const ShardCacheRead read = read_or_make_shards(cache, dp, [&](int64_t first, int64_t n) {
    return std::vector<Tensor>{space.encode(images(first, n))};
  });
  if (dp.rank() == 0)
    std::printf("latents: %lld %s, %lld encoded now, %lld read from the cache in %s\n",
                (long long)count, what.c_str(), (long long)read.made,
                (long long)(count - read.made), cache.dir.c_str());
  return read.parts[0];  // (count, z, h, w)
}

Tensor cached_canvas_latents(const LatentSpace& space, const ImageDataset& source, uint64_t seed,
                             int64_t count, dist::ProcessGroup& dp) {
  return cached_latents(space, std::to_string(seed), "training canvases", count, dp,
                        [&](int64_t first, int64_t n) {
                          return make_canvases(source, seed, /*test=*/false, first, n).images;
                        });
}

}  // namespace loom::train
