#include "loom/optim/ema.h"

#include <algorithm>

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

double Ema::decay_at(int64_t n) const {
  LOOM_CHECK(n >= 0) << "ema: update number must be non-negative, got " << n;
  return std::min(decay_, double(1 + n) / double(10 + n));
}

void Ema::update(int64_t n) {
  const double d = decay_at(n);
  for (size_t i = 0; i < params_.size(); ++i)
    backend_for(params_[i].tensor.device())
        .axpby(weights_[i].second, params_[i].tensor, d, 1.0 - d);
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
