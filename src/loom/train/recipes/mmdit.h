// The text-to-image MMDiT on captioned canvases (data/canvas.h, models/mmdit/mmdit.h): its
// recipe (flow matching with caption dropout, an EMA), its samples from captions and its
// evaluation by the canvas judge (train/recipes/canvas_judge.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/data/canvas.h"
#include "loom/data/captions.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/train/recipe.h"
#include "loom/train/recipes/dit.h"

namespace loom::train {

std::unique_ptr<Recipe> make_mmdit_recipe(const Config& config);

// Canvases [first, first + count) of a split as (count, 1, 64, 64) images and their items;
// source: the Fashion-MNIST split of the same name.
struct CanvasSet {
  Tensor images;
  std::vector<std::string> captions;
  std::vector<std::vector<CanvasItem>> items;
};
CanvasSet make_canvases(const ImageDataset& source, uint64_t seed, bool test, int64_t first,
                        int64_t count);

struct LatentSpace;
// Canvases sampled for captions (N, L) (the model's text_length), in [-1, 1]; a model of a
// latent space samples latents, which `latent` decodes.
Tensor sample_canvases(const models::Mmdit& model, const Tensor& captions,
                       const DitSampleOptions& options, const LatentSpace* latent = nullptr);

struct CanvasQuality {
  int64_t samples = 0;
  double caption = 0, place = 0, size = 0, cls = 0;  // the judge's scores (CanvasScores)
  double fid = 0;        // samples vs real test canvases, on the judge's canvas features
  double fid_floor = 0;  // as many other real test canvases vs the same
};
// Samples for the first `count` held-out (test) captions, judged against what each asked for.
CanvasQuality evaluate_mmdit(const models::Mmdit& model, const CaptionTokenizer& tokenizer,
                             const Config& run, const std::string& classifier_dir, int64_t count,
                             const DitSampleOptions& options, const LatentSpace* latent = nullptr);
Json canvas_quality_json(const CanvasQuality& q, const DitSampleOptions& options);

}  // namespace loom::train
