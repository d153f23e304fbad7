// A GPT checkpoint as a Hugging Face model directory: model.safetensors (metadata format "pt",
// Hugging Face's names and layouts) and config.json, for GPT2LMHeadModel (style "gpt2": its
// Conv1D weights are the transposes of Loom's Linear ones) or LlamaForCausalLM (style "llama":
// the fused qkv split into q_proj / k_proj / v_proj, the SwiGLU's w1 / w3 / w2 as gate / up /
// down). Both use Loom's conventions unchanged otherwise: tanh GELU ("gelu_new"), rotate-half
// RoPE, the norms' epsilons.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/dtype.h"

namespace loom::train {

struct HfExport {
  std::string architecture;  // "GPT2LMHeadModel" or "LlamaForCausalLM"
  int64_t tensors = 0, bytes = 0;
};

// The "model" part of checkpoint ckpt_dir (a gpt run's) into out_dir (created; files in it
// replaced atomically), its tensors in `dtype` (F32 or BF16).
HfExport export_hf(const std::string& ckpt_dir, const std::string& out_dir, DType dtype);

}  // namespace loom::train
