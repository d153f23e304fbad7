// The typed training configuration, read from TOML with --set overrides and validated.
#pragma once
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "loom/core/error.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/lowcomm/diloco.h"
#include "loom/models/autoencoder/autoencoder.h"
#include "loom/models/dit/dit.h"
#include "loom/models/gpt/gpt.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/models/vit/vit.h"
#include "loom/optim/adamw.h"
#include "loom/optim/schedule.h"
#include "loom/parallel/topology.h"
#include "loom/precision/recipe.h"
#include "loom/train/config_file.h"
#include "loom/train/model_spec.h"

namespace loom::train {

struct RunConfig {
  std::string name = "run";
  std::string out_dir = "runs";
  uint64_t seed = 0;
  double memory_limit_mb = 0;         // > 0: each process's live tensors may not exceed this
  double device_memory_limit_mb = 0;  // > 0: each process's live tensors on its GPU, likewise
  std::string profile_steps;          // "A:B": trace steps A..B (train/profiler.h); "": no profile
  bool tensorboard =
      true;  // the main rank's metrics also as TensorBoard scalars (run_dir/tensorboard)
  // The run's identity (train/run_directory.h): set when a run starts, kept by its resumes,
  // recorded in config.toml and in every checkpoint. "" in a config: a new run gets one.
  std::string id;
  // Threads of the CPU kernels; 0: OMP_NUM_THREADS, else the cores this process may use shared
  // by the ranks on its host (backend/cpu/threads.h).
  int64_t threads = 0;
};

// data.dataset: what a run trains on. Each model kind takes its own (its spec reads the key):
// dit fashion_mnist or images (PNG files), gpt kjv (the King James Bible), text (a file) or
// tokens (directories of `loom data prepare`), mmdit canvas (captioned canvases, data/canvas.h).
enum class Dataset { FashionMnist, Images, Kjv, Text, Tokens, Canvas };
const char* name_of(Dataset dataset);
// The dataset `name` names among `allowed` (model.kind `kind`'s), or an error naming `what`.
Dataset dataset_from_name(const std::string& name, const std::vector<Dataset>& allowed,
                          const std::string& what, const std::string& kind);

// Keys read depend on model.kind: dit reads dataset and path; gpt reads all of them.
struct DataConfig {
  Dataset dataset = Dataset::FashionMnist;
  std::string path = "/usr/share/datasets/fashion-mnist";  // gpt: the text file (dataset "text")
  // gpt, dataset "tokens": directories of `loom data prepare` (data.path, or several in
  // data.paths), mixed for training by data.weights (default: all 1)
  std::vector<std::string> paths;
  std::vector<double> weights;
  double val_fraction = 0.05;  // gpt: the held-out tail of the text (see split_text)
  // gpt: "bytes", "bpe" (a Loom BPE of at most model.vocab_size tokens, learned from the
  // training text by the run), a BPE file of `loom tokenizer train`, a Hugging Face
  // tokenizer.json (or a directory with it or vocab.json + merges.txt), or a tiktoken file (see
  // token_windows.h). mmdit: "words" (the captions' closed vocabulary), "bpe" (learned from the
  // training captions) or a tokenizer file as gpt's.
  std::string tokenizer = "bytes";
  std::string tokenizer_pattern = "gpt2";  // gpt, a .tiktoken tokenizer: gpt2, cl100k or o200k
  std::string cache_dir;  // gpt, dataset "kjv": where kjv.txt is produced ("" = default_cache_dir)
  // dit: train on one cluster of the training set only (a decentralized expert): the
  // assignments file of `loom cluster` and the cluster's index.
  std::string clusters;
  // dit, dataset "images": held-out PNG images (a folder or shards, as data.path), optional
  std::string val_path;
  int64_t cluster = -1;
  // mmdit, dataset "canvas": the training canvases drawn (canvas i from (canvas_seed, i)), their
  // items from the Fashion-MNIST files in `path`; the held-out ones are the test split's.
  int64_t canvases = 60000;
  int64_t canvas_seed = 0;
  // mmdit, model.latent: the run directory of a trained autoencoder; the model trains on its
  // latents of the canvases ("": on the pixels).
  std::string latent;
  // mmdit, model.text_encoder: a GPT checkpoint whose frozen features of the captions the text
  // encoder reads (its tokenizer reads them); "": the encoder embeds tokens of data.tokenizer.
  std::string text_encoder;
  // mmdit, data.captions = "classes": told each canvas's classes alone, not their layout (the
  // class-label baseline); "full": the captions.
  bool class_captions = false;
};

struct TrainLoopConfig {
  int64_t steps = 1000;
  int64_t batch_size = 64;
  int64_t grad_accum = 1;  // micro-batches per step (batch_size is per micro-batch)
  int64_t log_every = 10;
  int64_t ckpt_every = 0;  // 0: only at the end
  int64_t keep_checkpoints = 2;
  bool async_checkpoint = false;  // write checkpoints on a background thread from a snapshot
  double max_minutes = 0;         // > 0: stop (and checkpoint) when the time budget runs out
  int64_t stop_after = 0;         // > 0: stop (and checkpoint) once this global step is done
  double grad_clip = 1.0;         // <= 0: no clipping
  // F32, or BF16 ("bf16"): mixed precision (matmuls and attention on bf16 copies, f32 master
  // weights, gradients and optimizer state; see AutocastGuard)
  DType precision = DType::F32;
  // train.precision "auto": what it chose and why, for the run's first lines ("" otherwise).
  std::string precision_choice;
  // A low-precision recipe (train.precision = "fp8_tensorwise", ..., "nvfp4"; precision above is
  // then BF16 for everything else) and its [precision] keys; see precision/recipe.h.
  std::optional<precision::RecipeConfig> low_precision;
  double ema_decay = 0.999;  // dit only
  int64_t ema_start = 0;  // dit only: steps before the EMA starts tracking (it copies until then)
  bool augment = true;    // vit_classifier only: random flips and shifts by up to 2 pixels
  // gpt only: a Hugging Face model directory (GPT2LMHeadModel or LlamaForCausalLM, as `loom
  // ckpt export --format hf` writes) whose weights the run starts from instead of random ones.
  std::string init_from;
  // Where the model trains (train.device "cpu" or "cuda"): the parameters, optimizer state and
  // batches live there; data, checkpoints and reports stay on the host. A process takes the
  // GPU of its local rank (backend/cuda/runtime.cu).
  Device device = cpu_device();
  // train.tf32: f32 GEMMs on the GPU on TF32 tensor cores (operands rounded to 10 mantissa
  // bits), as PyTorch's allow_tf32. Off: f32 is f32.
  bool tf32 = false;
};

// [resilience]: how a run reacts to bad steps and slow ranks (see train/step_guard.h).
struct ResilienceConfig {
  int64_t max_skips_in_row = 3;  // skipped steps in a row after which the run rolls back
  int64_t max_rollbacks = 2;     // rollbacks after which the run stops instead
  bool skip_spikes = false;      // treat a loss spike like a non-finite step
  // Skip a spike, roll back to the newest checkpoint and replay to it, its batch skipped.
  bool spike_rollback = false;
  int64_t straggler_every = 50;   // steps between comparisons of the ranks' compute time (0: off)
  double straggler_factor = 1.5;  // flagged: compute time above this times the median
  // A rank flagged this many comparisons in a row is excluded (train/step_guard.h; 0: never).
  int64_t exclude_stragglers_after = 0;
  double spike_zscore = 6.0;  // a loss this many deviations above the last 50 is logged (0: off)
  int64_t consistency_every = 100;  // steps between replica weight-hash comparisons (0: off)
  // Signals that preempt the run: checkpoint, then exit 75 (train/preemption.h); "" : none.
  std::string preempt_signals = "TERM,INT,USR1";
  // In-memory checkpoints every N steps (0: off): each rank's copy in its machine's memory
  // file system and one at a buddy on another machine (checkpoint/peer_store.h).
  int64_t memory_checkpoint_every = 0;
  std::string memory_store = "/dev/shm";
};

struct SampleConfig {
  int64_t steps = 50;
  double cfg_scale = 2.0;
  bool heun = false;
  int64_t per_class = 10;  // rows of the sample grid are classes
  int64_t every = 0;       // also a grid every N steps (samples/, TensorBoard; 0 = at the end only)
};

struct EvalConfig {
  // dit:
  std::string classifier;  // checkpoint directory of the Fashion-MNIST classifier ("" = none)
  int64_t num_samples = 1000;
  int64_t val_images = 1000;  // test images of the held-out loss (0: none)
  // gpt: held-out loss every `every` steps (0 = only at the end) on `windows` fixed validation
  // windows spread over the held-out text; the final evaluation covers all of it.
  int64_t every = 100;
  int64_t windows = 64;
};

// mmdit, [dpo]: Diffusion-DPO post-training (train/recipes/preference_pairs.h): `reference` is a
// trained MMDiT's checkpoint directory, whose EMA weights are the frozen reference and the
// run's starting point ("": training by flow matching); `pairs` training captions are sampled
// twice each by it and ranked by the canvas judge; beta scales the loss's margins.
struct DpoConfig {
  std::string reference;
  int64_t pairs = 1000;
  double beta = 1000;
};

// gpt: text printed at the end of training (tokens = 0: none); an empty prompt starts the text
// after a newline.
struct LmSampleConfig {
  std::string prompt;
  int64_t tokens = 0;
  double temperature = 0.8;  // 0: greedy
};

// [parallel] and [dist]. train.batch_size is the global batch of one micro-step, split evenly
// over the dp ranks; pipeline micro-batches are train.grad_accum.
// [dist] device_group: how processes with train.device "cuda" exchange device tensors: NCCL
// (every process its own GPU), or staged through host memory over MPI (dist/staged_group.h:
// processes sharing a GPU, the CUDA backend's host emulation). The key's "auto" is resolved
// when read (NCCL where the build has it, else staged) and recorded so in config.toml.
enum class DeviceGroup { Nccl, Staged };

struct ParallelConfig {
  parallel::Topology topology;  // the degrees and each axis's typed choice
  double timeout_s = 600;       // [dist] timeout_s: a collective older than this aborts
  DeviceGroup device_group = DeviceGroup::Staged;
};

struct Config {
  RunConfig run;
  ParallelConfig parallel;
  ResilienceConfig resilience;
  // [lowcomm] method = "diloco": the dp_replicate groups are DiLoCo workers (lowcomm/diloco.h).
  std::optional<lowcomm::DiLoCoConfig> diloco;
  // model.kind: only that kind's keys are accepted (its spec reads them, model_spec.h), and
  // `model` holds its model's config: the DiT's, the GPT's, the MMDiT's, the autoencoder's, or the
  // ViT's (the classifier and the experts' router).
  ModelKind model_kind = ModelKind::Dit;
  std::variant<models::DitConfig, models::GptConfig, models::VitConfig, models::MmditConfig,
               models::AutoencoderConfig>
      model;
  const ModelSpec& spec() const { return model_spec(model_kind); }
  // The model's config; asking for another kind's is an error naming both.
  models::DitConfig& dit() { return model_as<models::DitConfig>("dit"); }
  const models::DitConfig& dit() const { return const_cast<Config*>(this)->dit(); }
  models::GptConfig& gpt() { return model_as<models::GptConfig>("gpt"); }
  const models::GptConfig& gpt() const { return const_cast<Config*>(this)->gpt(); }
  models::MmditConfig& mmdit() { return model_as<models::MmditConfig>("mmdit"); }
  const models::MmditConfig& mmdit() const { return const_cast<Config*>(this)->mmdit(); }
  models::AutoencoderConfig& autoencoder() {
    return model_as<models::AutoencoderConfig>("autoencoder");
  }
  const models::AutoencoderConfig& autoencoder() const {
    return const_cast<Config*>(this)->autoencoder();
  }
  models::VitConfig& vit() { return model_as<models::VitConfig>("vit"); }
  const models::VitConfig& vit() const { return const_cast<Config*>(this)->vit(); }
  DataConfig data;
  TrainLoopConfig train;
  optim::AdamWConfig adamw;
  optim::LrSchedule schedule;
  diffusion::FlowMatchingConfig flow;
  SampleConfig sample;       // dit
  LmSampleConfig lm_sample;  // gpt ([sample] section)
  EvalConfig eval;
  DpoConfig dpo;              // mmdit
  std::string resolved_toml;  // what was read, defaults included (saved in the run directory)
  std::string run_dir() const { return run.out_dir + "/" + run.name; }

 private:
  template <typename ModelConfig>
  ModelConfig& model_as(const char* what) {
    ModelConfig* m = std::get_if<ModelConfig>(&model);
    LOOM_CHECK(m != nullptr) << "a config of model.kind " << spec().name << " has no " << what
                             << " model";
    return *m;
  }
};

// Reads and validates a config; unknown keys, wrong types and bad values are errors naming
// the key. Only the keys of the chosen model.kind are read, so a key of the other kind (say
// model.patch in a gpt config) is an unknown key. `reads`, if given, receives every key read
// with its type and fallback (the config reference's test).
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   std::vector<ConfigFile::Read>* reads = nullptr);

// Where dataset "kjv" puts kjv.txt when data.cache_dir is empty: $XDG_CACHE_HOME/loom, else
// $HOME/.cache/loom, else <run.out_dir>/cache.
std::string default_cache_dir(const std::string& out_dir);
// data.cache_dir, or default_cache_dir(run.out_dir) when it is empty.
std::string resolved_cache_dir(const Config& config);

}  // namespace loom::train
