// Training, sampling and evaluation of the class-conditional DiT with flow matching.
#pragma once
#include <string>

#include "loom/train/config.h"

namespace loom::train {

// Trains per `config` in config.run_dir(); resume = continue from the newest checkpoint there.
void train_dit(const Config& config, bool resume);

struct DitSampleOptions {
  int64_t per_class = 10;
  int64_t steps = 50;
  double cfg_scale = 2.0;
  bool heun = false;
  uint64_t seed = 0;
  std::string png_path;   // grid, one row per class ("" = none)
  std::string npy_prefix;  // writes <prefix>_images.npy (N, C, H, W) f32 and _labels.npy i64
};

// Samples from a checkpoint directory (EMA weights), with the config saved beside it.
void sample_dit(const std::string& ckpt_dir, const DitSampleOptions& options);

}  // namespace loom::train
