// Exponential moving average of weights (used by the DiT for sampling).
#pragma once
#include <string>
#include <vector>

#include "loom/nn/module.h"

namespace loom::optim {

class Ema {
 public:
  Ema(const std::vector<nn::NamedParameter>& params, double decay);
  void update();  // ema = decay * ema + (1 - decay) * param
  void reset_to_params();  // ema = param (before the EMA starts averaging)
  // Named copies, for checkpoints and for loading into a model to sample.
  const std::vector<std::pair<std::string, Tensor>>& named_weights() const { return weights_; }
  // Copies the EMA weights into the tracked parameters (use on a model made for sampling).
  void copy_to_params() const;
  double decay() const { return decay_; }

 private:
  std::vector<nn::NamedParameter> params_;
  std::vector<std::pair<std::string, Tensor>> weights_;
  double decay_;
};

}  // namespace loom::optim
