// The run directory's checkpoints: runs/<name>/step-000100/ holding safetensors files and
// trainer_state.json, written under a temporary name and renamed into place, with a
// `latest` file naming the newest complete one.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "loom/checkpoint/json.h"
#include "loom/core/tensor.h"

namespace loom::train {

struct CheckpointContents {
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> files;  // "model" -> tensors
  Json state;  // trainer_state.json
};

// Writes step-<step>/ atomically, updates `latest`, keeps the newest `keep` checkpoints.
std::string save_checkpoint(const std::string& run_dir, int64_t step,
                            const CheckpointContents& contents, int64_t keep);
// The directory named by run_dir/latest, or "" if there is none.
std::string latest_checkpoint(const std::string& run_dir);
// Reads trainer_state.json and the named safetensors files of a checkpoint directory.
Json read_trainer_state(const std::string& ckpt_dir);
std::map<std::string, Tensor> read_tensors(const std::string& ckpt_dir, const std::string& file);

}  // namespace loom::train
