// A recipe is what the one training loop (train/trainer.h) needs to know of a model kind: how
// to build the model, make a batch, compute the loss, split the model into pipeline stages
// (from the model's own pieces), what else it checkpoints (an EMA), how it evaluates and what it
// reports at the end. Recipes are registered by model.kind (train/recipes/registry.cpp); the
// loop, the parallelism and the checkpoints are the same for every kind.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/json.h"
#include "loom/diffusion/png.h"
#include "loom/nn/module.h"
#include "loom/nn/moe.h"
#include "loom/nn/parallel_plan.h"
#include "loom/parallel/parallelize.h"
#include "loom/plan/cost_model.h"
#include "loom/train/checkpointer.h"
#include "loom/train/config.h"

namespace loom {
class Sampler;
}

namespace loom::train {

// Which of a micro-batch's samples this rank takes: the global batch of one micro-step is
// train.batch_size samples, rank r of the dp ranks takes `count` of them from `first` on.
struct Slot {
  int64_t step = 0, micro = 0;
  int64_t first = 0;  // the global index (within the step) of this rank's first sample
  int64_t count = 0;  // this rank's share of the micro-batch
};

// One rank's share of one micro-batch, as the recipe reads it (images and labels, or token ids
// and their targets).
struct Batch {
  Tensor x, y;
  Json data_state;  // what a checkpoint records to resume the data after this batch (or null)
};

// What the run has when the recipe is attached (after parallelize): the data-parallel group
// the recipe shares evaluation work over, and the parallelised model.
struct RunContext {
  parallel::ParallelModel& model;
  dist::ProcessGroup& dp;
  bool main = false;  // world rank 0: reports and files
};

// What the loop tells the recipe when training has ended.
struct RunSummary {
  int64_t step = 0;          // steps done in all (1-based: the last checkpoint's step)
  int64_t steps_run = 0;     // by this process
  double train_seconds = 0;  // in training steps (not evaluation or checkpoints)
};

class Recipe {
 public:
  virtual ~Recipe() = default;

  // Built and initialised from run.seed by the constructor; the loop parallelises it.
  virtual nn::Module& model() = 0;
  virtual nn::ParallelPlan parallel_plan() const = 0;
  virtual std::string describe() const = 0;  // "dit: 4.8M parameters, 196 tokens per image"
  virtual std::string describe_data() const { return ""; }  // a second line, if any
  virtual void start(RunContext& run) {}                    // after parallelize, before resuming
  // The main rank, once the run starts: files kept beside config.toml (a tokenizer).
  virtual void write_run_files(const std::string& run_dir) const {}

  // Checkpointed state besides the model and optimizer: per-piece values (an EMA), and
  // trainer_state.json fields (merged with the last batch's data_state).
  virtual std::vector<PieceState> piece_state() { return {}; }
  virtual Json state(int64_t step) const { return Json::object(); }
  virtual void resume(const Json& trainer_state) {}  // before the first batch is made

  // Called in (step, micro) order on a background thread.
  virtual Batch make_batch(const Slot& slot) = 0;
  // The mean loss of one micro-batch through the whole model (no pipeline).
  virtual Tensor loss(const Batch& batch, const Slot& slot) = 0;
  // The model as this rank's pipeline stages for one step's micro-batches (batches[m]); a kind
  // without (config.cpp refuses parallel.pp > 1 for it) keeps this.
  virtual parallel::PipelineStages pipeline_stages(const parallel::Pipeline& pipe,
                                                   const std::vector<Batch>& batches,
                                                   const std::vector<Slot>& slots) {
    LOOM_FAIL() << describe() << ": no pipeline parallelism";
    return {};
  }
  virtual void after_step(int64_t step, bool updated) {}  // an EMA follows the update
  // Every eval.every steps: metrics for the progress line (null: nothing evaluated). Collective.
  virtual Json evaluate(int64_t step) { return Json(); }
  // Every sample.every steps: pictures of how training goes (a sample grid), each by its
  // TensorBoard tag; the recipe keeps them in the run directory too. Collective.
  struct Image {
    std::string tag;
    ImageGrid grid;
  };
  virtual std::vector<Image> images(int64_t step) { return {}; }
  // After the last step and checkpoint: the report, samples, eval.json. Collective. Returns
  // the final evaluation's figures on the main rank (the trainer adds them to metrics.jsonl
  // and TensorBoard), null where there are none.
  virtual Json finish(const RunSummary& summary) = 0;
};

// The recipe of config.model_kind (its spec's, train/model_spec.h).
std::unique_ptr<Recipe> make_recipe(const Config& config);
// What checking a checkpoint of config's kind needs, without data: the bare model (its
// parameters' names and shapes).
std::unique_ptr<nn::Module> make_bare_model(const Config& config);
// The parallel plan of a bare model of config's kind.
nn::ParallelPlan bare_model_plan(const Config& config, const nn::Module& bare_model);
// The shape of a step of `samples` (global) of config's model, for the cost model: the FLOPs
// and the unit of the progress line, the memory a run needs.
plan::StepShape step_shape(const Config& config, int64_t samples);

// What several recipes do alike (recipes/shared.cpp):
// the samples `sampler` picks next of (images (N, C, H, W), labels (N)), with where the data
// resumes after them as the batch's data_state; resuming a sampler from that state; and the
// trained weights, whole, named as the model's parameters (collective over the mesh).
// (The sampler: of n samples, shuffled from run.seed, this dp rank's share of each batch.)
std::unique_ptr<Sampler> shuffled_sampler(int64_t n, const Config& config, const RunContext& run);
Batch sampled_batch(Sampler& sampler, const Tensor& images, const Tensor& labels);
void resume_sampler(Sampler& sampler, const Json& trainer_state);
parallel::NamedTensors trained_weights(parallel::ParallelModel& model);

// "1234 parameters", and for a mixture of experts " (567 active per token: 8 experts, top 2)".
std::string parameter_count(int64_t total, int64_t active, const nn::MoeConfig& moe);

// Element-wise sum over a group (losses, counts, flags; f32 on the wire).
std::vector<double> sum_over(dist::ProcessGroup& group, const std::vector<double>& values);

}  // namespace loom::train
