#include "loom/train/hf_export.h"

#include <filesystem>
#include <map>
#include <vector>

#include "loom/checkpoint/json_file.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"

namespace loom::train {

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// Loom's names -> Hugging Face's, per style. `t` transposes a Linear weight (out, in) into a
// Conv1D weight (in, out).
Named gpt2_tensors(const models::GptConfig& c, std::map<std::string, Tensor>& w) {
  Named out;
  auto take = [&](const std::string& loom, const std::string& hf, bool conv1d = false) {
    auto it = w.find(loom);
    LOOM_CHECK(it != w.end()) << "hf export: the checkpoint has no tensor " << loom;
    out.emplace_back(hf, conv1d ? contiguous(transpose(it->second, 0, 1)) : it->second);
    w.erase(it);
  };
  take("tok_embed.weight", "transformer.wte.weight");
  take("pos_embed.weight", "transformer.wpe.weight");
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string l = "blocks." + std::to_string(i) + ".", h = "transformer.h." +
                                                                 std::to_string(i) + ".";
    for (const char* p : {"weight", "bias"}) {
      take(l + "norm1." + p, h + "ln_1." + p);
      take(l + "norm2." + p, h + "ln_2." + p);
    }
    for (const auto& [loom, hf] : std::vector<std::pair<std::string, std::string>>{
             {"attn.qkv", "attn.c_attn"},
             {"attn.proj", "attn.c_proj"},
             {"mlp.fc1", "mlp.c_fc"},
             {"mlp.fc2", "mlp.c_proj"}}) {
      take(l + loom + ".weight", h + hf + ".weight", /*conv1d=*/true);
      take(l + loom + ".bias", h + hf + ".bias");
    }
  }
  take("norm_f.weight", "transformer.ln_f.weight");
  take("norm_f.bias", "transformer.ln_f.bias");
  if (!c.tie_embeddings) take("lm_head.weight", "lm_head.weight");
  return out;
}

Named llama_tensors(const models::GptConfig& c, std::map<std::string, Tensor>& w) {
  Named out;
  auto get = [&](const std::string& loom) {
    auto it = w.find(loom);
    LOOM_CHECK(it != w.end()) << "hf export: the checkpoint has no tensor " << loom;
    Tensor t = it->second;
    w.erase(it);
    return t;
  };
  const int64_t q = c.heads * c.head_dim(), kv = c.num_kv_heads() * c.head_dim();
  out.emplace_back("model.embed_tokens.weight", get("tok_embed.weight"));
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string l = "blocks." + std::to_string(i) + ".",
                      h = "model.layers." + std::to_string(i) + ".";
    out.emplace_back(h + "input_layernorm.weight", get(l + "norm1.weight"));
    const Tensor qkv = get(l + "attn.qkv.weight");  // rows: q heads, then k, then v
    out.emplace_back(h + "self_attn.q_proj.weight", contiguous(narrow(qkv, 0, 0, q)));
    out.emplace_back(h + "self_attn.k_proj.weight", contiguous(narrow(qkv, 0, q, kv)));
    out.emplace_back(h + "self_attn.v_proj.weight", contiguous(narrow(qkv, 0, q + kv, kv)));
    out.emplace_back(h + "self_attn.o_proj.weight", get(l + "attn.proj.weight"));
    out.emplace_back(h + "post_attention_layernorm.weight", get(l + "norm2.weight"));
    out.emplace_back(h + "mlp.gate_proj.weight", get(l + "mlp.w1.weight"));  // silu(w1 x) * w3 x
    out.emplace_back(h + "mlp.up_proj.weight", get(l + "mlp.w3.weight"));
    out.emplace_back(h + "mlp.down_proj.weight", get(l + "mlp.w2.weight"));
  }
  out.emplace_back("model.norm.weight", get("norm_f.weight"));
  if (!c.tie_embeddings) out.emplace_back("lm_head.weight", get("lm_head.weight"));
  return out;
}

Json hf_config(const models::GptConfig& c, DType dtype) {
  const char* torch_dtype = dtype == DType::BF16 ? "bfloat16" : "float32";
  if (!c.is_llama())
    return Json::object({{"architectures", Json::array({Json("GPT2LMHeadModel")})},
                         {"model_type", "gpt2"},
                         {"vocab_size", c.vocab_size},
                         {"n_positions", c.context},
                         {"n_embd", c.width},
                         {"n_layer", c.depth},
                         {"n_head", c.heads},
                         {"n_inner", c.mlp_hidden()},
                         {"activation_function", "gelu_new"},  // the tanh approximation
                         {"layer_norm_epsilon", 1e-5},
                         {"resid_pdrop", 0.0},
                         {"embd_pdrop", 0.0},
                         {"attn_pdrop", 0.0},
                         {"tie_word_embeddings", c.tie_embeddings},
                         {"torch_dtype", torch_dtype}});
  return Json::object({{"architectures", Json::array({Json("LlamaForCausalLM")})},
                       {"model_type", "llama"},
                       {"vocab_size", c.vocab_size},
                       {"max_position_embeddings", c.context},
                       {"hidden_size", c.width},
                       {"intermediate_size", c.mlp_hidden()},
                       {"num_hidden_layers", c.depth},
                       {"num_attention_heads", c.heads},
                       {"num_key_value_heads", c.num_kv_heads()},
                       {"head_dim", c.head_dim()},
                       {"hidden_act", "silu"},
                       {"rms_norm_eps", 1e-6},
                       {"rope_theta", c.rope_theta},
                       {"attention_bias", false},
                       {"mlp_bias", false},
                       {"tie_word_embeddings", c.tie_embeddings},
                       {"torch_dtype", torch_dtype}});
}

}  // namespace

HfExport export_hf(const std::string& ckpt_dir, const std::string& out_dir, DType dtype) {
  LOOM_CHECK(dtype == DType::F32 || dtype == DType::BF16)
      << "hf export: tensors are written as f32 or bf16, not " << dtype_name(dtype);
  const Config cfg = run_config_of(ckpt_dir, "gpt", "ckpt export --format hf");
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : CheckpointReader(ckpt_dir).read_all("model")) weights[name] = t;
  Named tensors = cfg.gpt.is_llama() ? llama_tensors(cfg.gpt, weights) : gpt2_tensors(cfg.gpt, weights);
  LOOM_CHECK(weights.empty()) << "hf export: " << weights.begin()->first
                              << " has no Hugging Face name (a model this export does not know)";
  HfExport result;
  result.architecture = cfg.gpt.is_llama() ? "LlamaForCausalLM" : "GPT2LMHeadModel";
  for (auto& [name, t] : tensors) {
    if (dtype == DType::BF16) t = to_dtype(t, DType::BF16);
    result.bytes += int64_t(t.nbytes());
  }
  result.tensors = int64_t(tensors.size());
  std::filesystem::create_directories(out_dir);
  save_safetensors(out_dir + "/model.safetensors", tensors,
                   {{"format", "pt"}, {"loom_checkpoint", ckpt_dir}});
  write_json_file(out_dir + "/config.json", hf_config(cfg.gpt, dtype));
  return result;
}

}  // namespace loom::train
