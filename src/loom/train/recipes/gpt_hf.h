// A GPT checkpoint as a Hugging Face model directory, and back: model.safetensors (metadata
// format "pt", Hugging Face's names and layouts; above a size limit model-0000K-of-0000N
// shards with model.safetensors.index.json) and config.json, for GPT2LMHeadModel (style "gpt2": its
// Conv1D weights are the transposes of Loom's Linear ones) or LlamaForCausalLM (style "llama":
// the fused qkv split into q_proj / k_proj / v_proj, the SwiGLU's w1 / w3 / w2 as gate / up /
// down), MistralForCausalLM (style "llama" with model.sliding_window; imported also without a
// window, sliding_window null), or Qwen2ForCausalLM (style "llama" with model.qkv_bias: q, k, v
// biases too; a window in every layer or none), or MixtralForCausalLM (style "llama" with a
// mixture in every block: each expert's w1, w3, w2; a window or none). All
// use Loom's conventions unchanged otherwise: tanh GELU ("gelu_new"), rotate-half RoPE, the norms'
// epsilons.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/dtype.h"
#include "loom/core/tensor.h"
#include "loom/models/gpt/gpt.h"
#include "loom/train/model_spec.h"

namespace loom::train {

// The "model" part of checkpoint ckpt_dir (a gpt run's) into out_dir (created; each file in it
// written atomically), its tensors in `dtype` (F32 or BF16), in shards of at most shard_bytes
// (Hugging Face's default is 5 GB).
HfExport export_hf(const std::string& ckpt_dir, const std::string& out_dir, DType dtype,
                   int64_t shard_bytes = 5'000'000'000);

// The weights of a Hugging Face model directory (one file or sharded) for a Loom GPT of config
// `c`, by Loom's parameter names, f32: an architecture other than c's style, a config.json
// that disagrees with c (naming the key), a missing or misshapen tensor, or one left over are
// each an error naming it.
std::vector<std::pair<std::string, Tensor>> import_hf(const std::string& dir,
                                                      const models::GptConfig& c);

}  // namespace loom::train
