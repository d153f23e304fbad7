// Moving a module's parameters to and from named tensors (a checkpoint's "state dict").
#pragma once
#include <map>
#include <string>
#include <vector>

#include "loom/nn/module.h"

namespace loom {

std::vector<std::pair<std::string, Tensor>> state_dict(const nn::Module& module);
// Copies every parameter from `tensors`; a missing name, an extra name or a shape mismatch
// is an error naming `origin` (the file) and the parameter — e.g. a checkpoint of another
// model.
void load_state_dict(const nn::Module& module, const std::map<std::string, Tensor>& tensors,
                     const std::string& origin);
// Named tensors as a map, for the loaders below.
std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& named);

}  // namespace loom
