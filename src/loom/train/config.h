// The typed training configuration, read from TOML with --set overrides and validated.
#pragma once
#include <string>
#include <vector>

#include "loom/diffusion/flow_matching.h"
#include "loom/models/dit/dit.h"
#include "loom/optim/adamw.h"
#include "loom/optim/schedule.h"

namespace loom::train {

struct RunConfig {
  std::string name = "run";
  std::string out_dir = "runs";
  uint64_t seed = 0;
};

struct DataConfig {
  std::string dataset = "fashion_mnist";  // "fashion_mnist"
  std::string path = "/usr/share/datasets/fashion-mnist";
};

struct TrainLoopConfig {
  int64_t steps = 1000;
  int64_t batch_size = 64;
  int64_t grad_accum = 1;       // micro-batches per step (batch_size is per micro-batch)
  int64_t log_every = 10;
  int64_t ckpt_every = 0;       // 0: only at the end
  int64_t keep_checkpoints = 2;
  double max_minutes = 0;       // > 0: stop (and checkpoint) when the time budget runs out
  int64_t stop_after = 0;       // > 0: stop (and checkpoint) once this global step is done
  double grad_clip = 1.0;       // <= 0: no clipping
  double ema_decay = 0.999;
  int64_t ema_start = 0;        // steps before the EMA starts tracking (it copies until then)
};

struct SampleConfig {
  int64_t steps = 50;
  double cfg_scale = 2.0;
  bool heun = false;
  int64_t per_class = 10;  // rows of the sample grid are classes
};

struct EvalConfig {
  std::string classifier;   // checkpoint directory of the Fashion-MNIST classifier ("" = none)
  int64_t num_samples = 1000;
};

struct Config {
  RunConfig run;
  std::string model_kind = "dit";
  models::DitConfig dit;
  DataConfig data;
  TrainLoopConfig train;
  optim::AdamWConfig adamw;
  optim::LrSchedule schedule;
  diffusion::FlowMatchingConfig flow;
  SampleConfig sample;
  EvalConfig eval;
  std::string resolved_toml;  // what was read, defaults included (saved in the run directory)
  std::string run_dir() const { return run.out_dir + "/" + run.name; }
};

// Reads and validates a config; unknown keys, wrong types and bad values are errors naming
// the key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace loom::train
