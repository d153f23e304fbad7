// AdamW with decoupled weight decay; state (exp_avg, exp_avg_sq) in f32 per parameter.
#pragma once
#include <string>
#include <vector>

#include "loom/nn/module.h"

namespace loom::optim {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied only to parameters marked weight_decay
};

class AdamW {
 public:
  AdamW(std::vector<nn::NamedParameter> params, AdamWConfig config);
  // With the moments given (views into buffers someone else owns, e.g. ZeRO's flat shards):
  // exp_avg[i] and exp_avg_sq[i] belong to params[i] and have its shape.
  AdamW(std::vector<nn::NamedParameter> params, std::vector<Tensor> exp_avg,
        std::vector<Tensor> exp_avg_sq, AdamWConfig config);
  // One update with learning rate lr for every parameter that has a gradient.
  void step(double lr);
  void zero_grad();  // drops the gradients (the next backward allocates fresh ones)
  int64_t steps_taken() const { return step_; }
  // State for checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq".
  std::vector<std::pair<std::string, Tensor>> named_state() const;
  void set_steps_taken(int64_t step) { step_ = step; }
  const AdamWConfig& config() const { return config_; }

 private:
  struct Slot {
    nn::NamedParameter param;
    Tensor exp_avg, exp_avg_sq;
  };
  std::vector<Slot> slots_;
  AdamWConfig config_;
  int64_t step_ = 0;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before
// clipping (max_norm <= 0: only measures).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace loom::optim
