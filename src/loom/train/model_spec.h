// A model kind as the trainer knows it (torchtitan's TrainSpec is the idea): its config keys,
// what the parallel layouts split in it, its recipe, its bare model and parallel plan, the
// shape of its step for the cost and memory models, and its `loom sample` / `loom eval`.
// One spec per kind, in its file under train/recipes/, registered by name in
// train/recipes/registry.cpp: nothing else compares kind names.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/device.h"
#include "loom/core/dtype.h"
#include "loom/core/tensor.h"
#include "loom/nn/module.h"
#include "loom/nn/moe.h"
#include "loom/nn/parallel_plan.h"
#include "loom/plan/cost_model.h"

namespace loom::train {

class ConfigFile;
class Recipe;
struct Config;
struct SampleCall;
struct EvalCall;

// model.kind, parsed once (the registry maps names to these).
enum class ModelKind { Dit, Gpt, VitClassifier, DitRouter, Mmdit, Autoencoder };

// What the checks of a topology against a model need (parallel.tp, cp, pp, ep and
// precision.bf16_blocks, checked before anything is built): which layouts the model has and
// the sizes they split.
struct ParallelFacts {
  bool pipeline = false;            // parallel.pp > 1
  bool tensor_and_context = false;  // parallel.tp, cp > 1
  std::string no_context{};  // why this config's model refuses parallel.cp > 1 (empty: it does not)
  int64_t depth = 0;         // blocks
  int64_t heads = 0, kv_heads = 0;        // attention heads (tp, Ulysses cp)
  int64_t mlp_hidden = 0;                 // the MLP's hidden features (tp)
  int64_t ssm_heads = 0, ssm_groups = 0;  // Mamba-2 layers' heads and groups (tp; 0: none)
  int64_t tokens = 0;                     // per sample: what context parallelism splits
  std::string tokens_what{};              // how errors name them: "16 tokens (model.context)"
  int64_t vocab = 0;                      // > 0: the embedding and head split over tp (no pipeline)
  const nn::MoeConfig* moe = nullptr;     // the model's mixture of experts, when it may have one
  // The parts of the tokens that context and sequence parallelism split each of (the plan's
  // sequence_segments; empty: the tokens as one sequence).
  std::vector<int64_t> segments{};
};

// What `loom ckpt export --format hf` wrote: a Hugging Face model directory.
struct HfExport {
  std::string architecture;  // "GPT2LMHeadModel", "LlamaForCausalLM", ...
  int64_t tensors = 0, bytes = 0, shards = 1;
};

// A model and the loss of a synthetic batch through it (a closure over the batch).
struct BenchStep {
  std::shared_ptr<nn::Module> model;
  std::function<Tensor()> loss;
};

struct ModelSpec {
  ModelKind kind = ModelKind::Dit;
  const char* name = "";  // model.kind
  // Reads this kind's keys ([model], and its keys of [data], [train], [diffusion], [sample],
  // [eval]) into `config`, validating each against the others.
  void (*read)(ConfigFile& file, Config& config) = nullptr;
  ParallelFacts (*parallel_facts)(const Config& config) = nullptr;
  bool diloco = false;  // trains under lowcomm.method "diloco"
  std::unique_ptr<Recipe> (*make_recipe)(const Config& config) = nullptr;
  // The model's parameters' names and shapes, never initialised (checkpoint checks, dry run).
  std::unique_ptr<nn::Module> (*bare_model)(const Config& config) = nullptr;
  nn::ParallelPlan (*plan_of)(const nn::Module& bare_model) = nullptr;
  std::vector<std::string> piece_states{};  // per-piece states the recipe checkpoints (an EMA)
  // A step of `samples` (global) of `tokens` each (a sequence model's; 0: its context; image
  // models ignore it): its FLOPs, unit and the memory model's counts.
  plan::StepShape (*step_shape)(const Config& config, int64_t samples, int64_t tokens) = nullptr;
  // `loom bench`: the model and the loss of one fixed synthetic batch of `shape` on `device`
  // (null: the kind is not benchmarked).
  BenchStep (*bench_step)(const Config& config, const plan::StepShape& shape,
                          Device device) = nullptr;
  // `loom sample` and `loom eval` of this kind's checkpoints (null: the command has nothing
  // for it), and the groups of their flags it reads (train/recipes/commands.h).
  void (*sample)(const SampleCall& call) = nullptr;
  void (*eval)(const EvalCall& call) = nullptr;
  std::vector<std::string> command_flags{};
  // The state-dict adapter: a checkpoint's model part as a Hugging Face model directory in
  // `dtype`, in files of at most shard_bytes (null: the kind has no Hugging Face format).
  HfExport (*export_hf)(const std::string& checkpoint, const std::string& out_dir, DType dtype,
                        int64_t shard_bytes) = nullptr;
};

// The spec of a kind, or of a model.kind name (an unknown name fails with `what` and the
// known names).
const ModelSpec& model_spec(ModelKind kind);
const ModelSpec& model_spec(const std::string& name, const std::string& what);
// "dit, gpt, vit_classifier, dit_router or mmdit"
std::string model_kind_names();
// Every registered spec, in the registry's order.
std::vector<const ModelSpec*> model_specs();

}  // namespace loom::train
