#include "loom/train/recipes/preference_pairs.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/hash.h"
#include "loom/core/rng.h"
#include "loom/data/captions.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/latents.h"
#include "loom/train/recipes/mmdit.h"
#include "loom/train/recipes/shard_cache.h"

namespace loom::train {

namespace {

constexpr int64_t kShard = 250;  // pairs per cache file

// What the model is told of training canvas i's items: the caption, or their classes alone.
std::string told_caption(const Config& cfg, const Canvas& canvas) {
  return cfg.data.class_captions ? canvas_class_caption(canvas.items) : canvas.caption;
}

}  // namespace

double canvas_preference_score(const CanvasReading& reading, const std::vector<CanvasItem>& asked) {
  const CanvasScores s = score_canvases({reading}, {asked});
  return s.place + s.size + s.cls;
}

PreferencePairs cached_preference_pairs(const models::Mmdit& reference,
                                        const CaptionTokenizer& tokenizer,
                                        const LatentSpace* latent, const models::Vit& judge,
                                        const ImageDataset& source, const Config& cfg,
                                        const DitSampleOptions& o, dist::ProcessGroup& dp) {
  const models::MmditConfig& m = cfg.mmdit();
  const uint64_t canvas_seed = uint64_t(cfg.data.canvas_seed);
  // Everything the pairs depend on names their directory: another choice samples anew.
  // (The reference by its manifest, whose checksums cover its weights.)
  std::ifstream manifest(cfg.dpo.reference + "/manifest.json", std::ios::binary);
  std::ostringstream what;
  what << manifest.rdbuf() << " canvas_seed " << canvas_seed << " seed " << cfg.run.seed
       << " captions " << (cfg.data.class_captions ? "classes" : "full") << " steps " << o.steps
       << " heun " << o.heun << " cfg " << o.cfg_scale << " shift " << o.shift << " precision "
       << dtype_name(o.precision) << " judge " << cfg.eval.classifier;
  const std::string key = what.str();
  const std::string dir = std::filesystem::path(cfg.dpo.reference).parent_path().string() +
                          "/preference_pairs/" + xxh64_hex(key.data(), key.size());
  const ShardCacheRead read = read_or_make_shards(
      {dir, cfg.dpo.pairs, kShard, {"samples", "scores"}}, dp, [&](int64_t first, int64_t n) {
        std::vector<std::string> captions;
        std::vector<std::vector<CanvasItem>> asked;
        for (int64_t i = first; i < first + n; ++i) {
          const Canvas c = make_canvas(source, canvas_seed, /*test=*/false, i);
          for (int k = 0; k < 2; ++k) {  // each caption twice: rows 2i and 2i + 1
            captions.push_back(told_caption(cfg, c));
            asked.push_back(c.items);
          }
        }
        DitSampleOptions shard = o;
        shard.seed = RngKey{cfg.run.seed, "dpo.pairs", std::to_string(first)}.hash();
        const Tensor ids = tokenizer.encode_all(captions, m.text_length);
        // Pixels as sampled (clamped to the data range); latents as sampled, judged decoded.
        const diffusion::VelocityFn velocity = [&](const Tensor& xt, const Tensor& t,
                                                   const Tensor& y) {
          return reference.forward(xt, t, y);
        };
        const Tensor x = latent ? sample_model_space(velocity, m.channels, m.image_size,
                                                     CaptionVocab::kNull, ids, shard)
                                : sample_images(velocity, m.channels, m.image_size,
                                                CaptionVocab::kNull, ids, shard);
        const std::vector<CanvasReading> readings =
            read_canvases(judge, latent ? latent->decode(x) : x);
        std::vector<float> scores;
        for (size_t k = 0; k < readings.size(); ++k)
          scores.push_back(float(canvas_preference_score(readings[k], asked[k])));
        return std::vector<Tensor>{
            reshape(to_device(x, cpu_device()), {n, 2, m.channels, m.image_size, m.image_size}),
            from_vector(scores, {n, 2})};
      });
  // The preferred sample first; a tie says nothing of what the judge wants.
  PreferencePairs pairs;
  pairs.sampled = cfg.dpo.pairs;
  pairs.dir = dir;
  const std::vector<float> scores = to_vector(read.parts[1]);
  std::vector<int64_t> rows;  // of (sampled x 2): preferred, rejected
  for (int64_t i = 0; i < pairs.sampled; ++i) {
    const float a = scores[size_t(2 * i)], b = scores[size_t(2 * i + 1)];
    if (a == b) continue;
    rows.push_back(a > b ? 2 * i : 2 * i + 1);
    rows.push_back(a > b ? 2 * i + 1 : 2 * i);
    pairs.preferred += std::max(a, b);
    pairs.rejected += std::min(a, b);
    pairs.captions.push_back(
        told_caption(cfg, make_canvas(source, canvas_seed, /*test=*/false, i)));
  }
  const int64_t kept = int64_t(pairs.captions.size());
  LOOM_CHECK(kept > 0) << "dpo: the judge scored both samples of each of the " << pairs.sampled
                       << " pairs alike: nothing to prefer (more dpo.pairs?)";
  pairs.preferred /= double(kept);
  pairs.rejected /= double(kept);
  NoGradGuard no_grad;
  const Tensor samples = read.parts[0];  // (sampled, 2, C, H, W)
  const Tensor flat = reshape(samples, {2 * pairs.sampled, m.channels, m.image_size, m.image_size});
  pairs.images = reshape(index_select(flat, 0, from_vector(rows, {int64_t(rows.size())})),
                         {kept, 2, m.channels, m.image_size, m.image_size});
  if (dp.rank() == 0)
    std::printf(
        "dpo: %lld pairs (%lld sampled now, %lld read from %s); %lld with a preferred sample, "
        "mean score %.3f against %.3f (of 3)\n",
        (long long)pairs.sampled, (long long)read.made, (long long)(pairs.sampled - read.made),
        dir.c_str(), (long long)kept, pairs.preferred, pairs.rejected);
  return pairs;
}

}  // namespace loom::train
