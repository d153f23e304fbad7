// The model kinds' specs (train/model_spec.h), each defined in its kind's file here and listed
// once in registry.cpp, and what their files share.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/tensor.h"
#include "loom/nn/moe.h"
#include "loom/train/model_spec.h"

namespace loom::train {

extern const ModelSpec kDitSpec;            // dit_spec.cpp
extern const ModelSpec kGptSpec;            // gpt_spec.cpp
extern const ModelSpec kVitClassifierSpec;  // vit_spec.cpp
extern const ModelSpec kDitRouterSpec;      // vit_spec.cpp
extern const ModelSpec kMmditSpec;          // mmdit_spec.cpp
extern const ModelSpec kAutoencoderSpec;    // autoencoder_spec.cpp

class ConfigFile;
// [train] ema_decay and ema_start, [diffusion], [sample] and [eval] of a diffusion model
// (dit_spec.cpp); null_class: its unconditional label (or caption token).
void read_diffusion_keys(ConfigFile& f, Config& c, int64_t null_class);
// [data] of the kinds trained on the captioned canvases (mmdit_spec.cpp): data.dataset (canvas),
// path, canvases and canvas_seed.
void read_canvas_keys(ConfigFile& f, Config& c, const char* kind);

// The parameters a model's mixtures of experts add: each one's experts in place of the dense
// MLP's 8 w^2.
template <typename ModelConfig>
double mixture_extra_parameters(const ModelConfig& c) {
  const nn::MoeConfig moe = c.moe_config();
  const double w = double(c.width), per_block = double((moe.experts + moe.shared_experts) *
                                                       moe.expert_parameters(c.width));
  double extra = 0;
  for (int64_t i = 0; i < c.depth; ++i)
    if (c.is_moe_block(i)) extra += per_block - 8 * w * w;
  return extra;
}

// Ids in [0, n) of `shape`, fixed by `name` (the synthetic data of `loom bench`).
Tensor synthetic_ids(const Shape& shape, int64_t n, const std::string& name);

}  // namespace loom::train
