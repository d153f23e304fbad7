// Diffusion-DPO's data on captioned canvases (diffusion/preference.h): a frozen reference
// MMDiT samples each of the first training captions twice; the canvas judge scores both
// samples against what the caption asked for, and the better one is preferred (ties dropped).
#pragma once
#include <string>
#include <vector>

#include "loom/data/captions.h"
#include "loom/data/idx.h"
#include "loom/dist/process_group.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/models/vit/vit.h"
#include "loom/train/config.h"
#include "loom/train/recipes/canvas_judge.h"
#include "loom/train/recipes/dit.h"

namespace loom::train {

struct LatentSpace;

struct PreferencePairs {
  Tensor images;                       // (M, 2, C, H, W): preferred, rejected (the model's space)
  std::vector<std::string> captions;   // each pair's caption, as the model is told it
  int64_t sampled = 0;                 // pairs sampled, M of them with a preferred sample
  double preferred = 0, rejected = 0;  // the kept pairs' mean scores (canvas_preference_score)
  std::string dir;                     // where they are cached
};

// A canvas's score against its caption: the fractions of its quadrants holding an item or
// nothing as asked, of the asked items found in their size, and found as their class, summed
// (0 to 3).
double canvas_preference_score(const CanvasReading& reading, const std::vector<CanvasItem>& asked);

// Pairs for training canvases [0, cfg.dpo.pairs) of cfg.data.canvas_seed, sampled by
// `reference` (the EMA weights of checkpoint cfg.dpo.reference, reading captions through
// `tokenizer`) with the run's sample
// options `o` (each shard's seed its own), decoded by `latent` in latent space, judged by `judge`.
// Cached as shards (shard_cache.h) beside the reference's run, under a hash of everything the
// samples depend on. Collective over `dp`.
PreferencePairs cached_preference_pairs(const models::Mmdit& reference,
                                        const CaptionTokenizer& tokenizer,
                                        const LatentSpace* latent, const models::Vit& judge,
                                        const ImageDataset& source, const Config& cfg,
                                        const DitSampleOptions& o, dist::ProcessGroup& dp);

}  // namespace loom::train
