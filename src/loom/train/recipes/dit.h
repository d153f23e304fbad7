// The class-conditional DiT with flow matching and an EMA of its weights: its recipe, and
// sampling and evaluation from its checkpoints.
#pragma once
#include <memory>
#include <string>

#include "loom/diffusion/flow_matching.h"
#include "loom/models/dit/dit.h"
#include "loom/ops/ops.h"
#include "loom/optim/ema.h"
#include "loom/train/recipe.h"

namespace loom::train {

struct LatentSpace;

std::unique_ptr<Recipe> make_dit_recipe(const Config& config);
// A step of `batch` images of `config`'s DiT, for the cost and memory models (dit_spec.cpp).
plan::StepShape dit_step_shape(std::string name, const models::DitConfig& config, int64_t batch);

struct DitSampleOptions {
  int64_t per_class = 10;
  int64_t steps = 50;
  double cfg_scale = 2.0;
  bool heun = false;
  uint64_t seed = 0;
  std::string png_path;          // grid, one row per class ("" = none)
  std::string npy_prefix;        // writes <prefix>_images.npy (N, C, H, W) f32 and _labels.npy i64
  Device device = cpu_device();  // where the sampling runs: the velocity model's device
  // The velocity model's autocast: the run's train.precision (bf16 where it trained in bf16:
  // about 1.6x faster samples on a CPU with native bf16).
  DType precision = DType::F32;
  int64_t only_class = -1;  // >= 0: one row, of this class alone (loom sample --class)
  double shift = 1.0;       // the run's diffusion.shift (the sampler follows the training times)
  const LatentSpace* latent = nullptr;  // a latent model's (model.latent): decodes its samples
};

// Samples from a checkpoint directory (EMA weights), with the config saved beside it.
void sample_dit(const std::string& ckpt_dir, const DitSampleOptions& options);

// Samples images (N, C, H, W) in [-1, 1] for the given labels, in chunks of bounded memory,
// from a DiT or any velocity of images of `config`'s shape (the experts' mixture).
Tensor sample_dit_images(const diffusion::VelocityFn& velocity, const models::DitConfig& config,
                         const Tensor& labels, const DitSampleOptions& options);
Tensor sample_dit_images(const models::Dit& model, const Tensor& labels,
                         const DitSampleOptions& options);
// The pipeline stages of a diffusion transformer (the DiT, the MMDiT) for one step's
// micro-batches (their flow-matching draws keyed as the loss's): embedders before the first stage,
// its blocks, the final layer and the loss after the last. Between stages travels the token
// sequence (B, S, D) with the conditioning appended as one more token, (B, S + 1, D): every stage's
// blocks need both, and the conditioning's gradient flows back through every stage to the
// embedders. Model: embed(x_t, t, labels) -> {tokens, conditioning}, run_blocks(h, c, begin, end),
// head(h, c), device().
template <typename Model>
parallel::PipelineStages conditioned_pipeline_stages(const Model& model,
                                                     const parallel::Pipeline& pipe,
                                                     const std::vector<Batch>& batches,
                                                     const std::vector<Slot>& slots,
                                                     const Config& cfg, int64_t S, int64_t D) {
  auto fm = std::make_shared<std::vector<diffusion::FlowMatchingBatch>>();
  for (size_t m = 0; m < batches.size(); ++m)
    fm->push_back(diffusion::flow_matching_batch(batches[m].x, batches[m].y, cfg.flow, cfg.run.seed,
                                                 slots[m].step, slots[m].first));
  auto pack = [](const Tensor& h, const Tensor& c) { return cat({h, unsqueeze(c, 1)}, 1); };
  auto tokens = [S](const Tensor& a) { return contiguous(narrow(a, 1, 0, S)); };  // (B, S, D)
  auto conditioning = [S](const Tensor& a) {                                      // (B, D)
    return contiguous(squeeze(narrow(a, 1, S, 1), 1));
  };
  parallel::PipelineStages st;
  for (const auto& blocks : pipe.chunk_blocks)  // [begin, end) of each of this rank's chunks
    st.forward.push_back([=, &model](const Tensor& a) {
      const Tensor c = conditioning(a);
      return pack(model.run_blocks(tokens(a), c, blocks.first, blocks.second), c);
    });
  st.input = [=, &model](int64_t m) {
    const auto& b = (*fm)[size_t(m)];
    const auto e = model.embed(b.xt, b.t, b.labels);
    return pack(e.tokens, e.conditioning);
  };
  st.loss = [=, &model](const Tensor& out, int64_t m) {
    return mse(model.head(tokens(out), conditioning(out)), (*fm)[size_t(m)].target);
  };
  st.activation_shape = {fm->at(0).xt.size(0), S + 1, D};
  st.device = model.device();
  return st;
}

// The diffusion recipes' EMA of the weights this rank holds: its values as the checkpointed
// per-piece state "ema"; after a step that updated the weights, a copy of them until
// train.ema_start, then the average (optim::Ema::update's warm-up counted from there).
PieceState ema_piece_state(const optim::Ema& ema);
void follow_weights(optim::Ema& ema, parallel::ParallelModel& model, const Config& cfg,
                    int64_t step, bool updated);

// The same for any diffusion model of (N, channels, size, size): labels (N) i64, or captions
// (N, L); null_class: the unconditional label (or caption token) of guidance. The images, in
// [-1, 1] (a latent model's decoded by options.latent); sample_model_space: what the model
// samples as it is (a latent model's latents, not clamped).
Tensor sample_images(const diffusion::VelocityFn& velocity, int64_t channels, int64_t size,
                     int64_t null_class, const Tensor& labels, const DitSampleOptions& options);
Tensor sample_model_space(const diffusion::VelocityFn& velocity, int64_t channels, int64_t size,
                          int64_t null_class, const Tensor& labels,
                          const DitSampleOptions& options);
// The flow-matching loss of `velocity` over the first n held-out (images, labels), with draws
// no training step uses, in f32. Collective over dp: the chunks are shared over its ranks, and
// every rank runs as many forwards (under ZeRO-3 or TP each forward holds collectives): one
// without a chunk of its own left runs the first chunk again and discards it.
double held_out_flow_loss(const diffusion::VelocityFn& velocity, const Tensor& images,
                          const Tensor& labels, int64_t n,
                          const diffusion::FlowMatchingConfig& flow, uint64_t seed,
                          dist::ProcessGroup& dp, Device device);
// The class grid (PNG) and/or .npy files of options.
void write_samples(const diffusion::VelocityFn& velocity, const models::DitConfig& config,
                   const DitSampleOptions& options);

struct DitQuality {
  int64_t samples = 0;
  double class_accuracy = 0;  // of the samples, by the classifier, against their labels
  double fid = 0;             // samples vs the test set, on the classifier's features
  double fid_floor = 0;       // the same number of real training images vs the test set
};

// Class-balanced samples judged by the classifier in `classifier_dir`; writes nothing.
DitQuality evaluate_dit(const diffusion::VelocityFn& velocity, const models::DitConfig& config,
                        const std::string& classifier_dir, const std::string& data_path,
                        int64_t num_samples, const DitSampleOptions& options);
// What eval.json records of an evaluation.
Json quality_json(const DitQuality& quality, const DitSampleOptions& options);
// Loads the EMA weights of a checkpoint and evaluates them; writes the figures to out_path.
DitQuality evaluate_dit_checkpoint(const std::string& ckpt_dir, const std::string& classifier_dir,
                                   int64_t num_samples, const DitSampleOptions& options,
                                   const std::string& out_path);

}  // namespace loom::train
