#include "loom/optim/ema.h"

#include "loom/backend/backend.h"
#include "loom/ops/ops.h"

namespace loom::optim {

Ema::Ema(const std::vector<nn::NamedParameter>& params, double decay)
    : params_(params), decay_(decay) {
  LOOM_CHECK(decay >= 0 && decay <= 1) << "ema: decay must be in [0, 1], got " << decay;
  MemCategoryScope scope(MemCategory::OptimizerState);
  for (const auto& p : params_) {
    Tensor copy = Tensor::empty(p.tensor.shape(), p.tensor.dtype(), p.tensor.device());
    backend_for(copy.device()).copy(p.tensor, copy);
    weights_.emplace_back(p.name, copy);
  }
}

void Ema::update() {
  for (size_t i = 0; i < params_.size(); ++i)
    backend_for(params_[i].tensor.device()).axpby(weights_[i].second, params_[i].tensor, decay_, 1.0 - decay_);
}

void Ema::reset_to_params() {
  for (size_t i = 0; i < params_.size(); ++i)
    backend_for(params_[i].tensor.device()).copy(params_[i].tensor, weights_[i].second);
}

void Ema::copy_to_params() const {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) copy_(params_[i].tensor, weights_[i].second);
}

}  // namespace loom::optim
