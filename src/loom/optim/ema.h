// Exponential moving average of weights (used by the DiT for sampling).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/module.h"

namespace loom::optim {

class Ema {
 public:
  Ema(const std::vector<nn::NamedParameter>& params, double decay);
  // The decay of update number n (from 0): (1 + n) / (10 + n), capped at decay(). A fixed
  // 0.999 from the start would still hold half of the first weights after 700 updates; the
  // warm-up lets the average forget them early and widens its window as training goes on.
  double decay_at(int64_t n) const;
  void update(int64_t n);  // ema = d * ema + (1 - d) * param, d = decay_at(n)
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
