#include "loom/checkpoint/state_dict.h"

#include <cmath>

#include "loom/ops/creation.h"
#include "loom/ops/ops.h"

namespace loom {

std::vector<std::pair<std::string, Tensor>> state_dict(const nn::Module& module) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& p : module.named_parameters()) out.emplace_back(p.name, p.tensor);
  return out;
}

std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& named) {
  return std::map<std::string, Tensor>(named.begin(), named.end());
}

void load_state_dict(const nn::Module& module, const std::map<std::string, Tensor>& tensors,
                     const std::string& origin) {
  NoGradGuard no_grad;
  const auto targets = state_dict(module);
  for (const auto& [name, target] : targets) {
    auto it = tensors.find(name);
    LOOM_CHECK(it != tensors.end())
        << origin << ": has no tensor '" << name << "' (is it a checkpoint of another model?)";
    LOOM_CHECK(it->second.shape() == target.shape())
        << origin << ": tensor '" << name << "' has shape " << it->second.shape()
        << ", the model expects " << target.shape() << " (a checkpoint of another model?)";
    // Weights from outside (a checkpoint, an export, another tool's file) must be finite: a
    // NaN in them would end the run steps later with nothing naming the file.
    int64_t non_finite = 0;
    for (float v : to_vector(it->second)) non_finite += !std::isfinite(v);
    LOOM_CHECK(non_finite == 0) << origin << ": tensor '" << name << "' holds " << non_finite
                                << " NaN or infinite value(s) of " << it->second.numel();
    if (!target.allocated()) target.storage()->materialize();  // built deferred: values now
    copy_(target, it->second);
  }
  LOOM_CHECK(tensors.size() == targets.size())
      << origin << ": holds " << tensors.size() << " tensors, the model has " << targets.size()
      << " (a checkpoint of another model?)";
}

}  // namespace loom
