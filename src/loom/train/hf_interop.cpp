#include "loom/train/hf_interop.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
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
    const std::string l = "blocks." + std::to_string(i) + ".",
                      h = "transformer.h." + std::to_string(i) + ".";
    for (const char* p : {"weight", "bias"}) {
      take(l + "norm1." + p, h + "ln_1." + p);
      take(l + "norm2." + p, h + "ln_2." + p);
    }
    for (const auto& [loom, hf] :
         std::vector<std::pair<std::string, std::string>>{{"attn.qkv", "attn.c_attn"},
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
                         {"bos_token_id", nullptr},  // Loom's GPTs have no special tokens
                         {"eos_token_id", nullptr},
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
                       {"bos_token_id", nullptr},
                       {"eos_token_id", nullptr},
                       {"torch_dtype", torch_dtype}});
}

}  // namespace

HfExport export_hf(const std::string& ckpt_dir, const std::string& out_dir, DType dtype,
                   int64_t shard_bytes) {
  LOOM_CHECK(dtype == DType::F32 || dtype == DType::BF16)
      << "hf export: tensors are written as f32 or bf16, not " << dtype_name(dtype);
  const Config cfg = run_config_of(ckpt_dir, "gpt", "ckpt export --format hf");
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : CheckpointReader(ckpt_dir).read_all("model")) weights[name] = t;
  Named tensors =
      cfg.gpt.is_llama() ? llama_tensors(cfg.gpt, weights) : gpt2_tensors(cfg.gpt, weights);
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
  // Shards in order, each as full as the limit allows (a tensor larger than it alone).
  std::vector<Named> shards(1);
  int64_t in_shard = 0;
  for (auto& named : tensors) {
    const int64_t n = int64_t(named.second.nbytes());
    if (in_shard > 0 && in_shard + n > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(named);
    in_shard += n;
  }
  result.shards = int64_t(shards.size());
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"loom_checkpoint", ckpt_dir}};
  if (shards.size() == 1) {
    save_safetensors(out_dir + "/model.safetensors", tensors, metadata);
  } else {
    Json weight_map = Json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      char file[64];
      std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
      save_safetensors(out_dir + "/" + file, shards[k], metadata);
      for (const auto& [name, t] : shards[k]) weight_map.set(name, file);
    }
    write_json_file(out_dir + "/model.safetensors.index.json",
                    Json::object({{"metadata", Json::object({{"total_size", result.bytes}})},
                                  {"weight_map", weight_map}}));
  }
  write_json_file(out_dir + "/config.json", hf_config(cfg.gpt, dtype));
  return result;
}

namespace {

// Every tensor of a Hugging Face directory: model.safetensors, or the shards its index names.
std::map<std::string, Tensor> read_hf_tensors(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    std::set<std::string> named;
    const Json j = read_json_file(index);  // kept: items() refers into it
    for (const auto& [name, file] : j.at("weight_map").items()) named.insert(file.as_string());
    for (const std::string& f : named) files.push_back(dir + "/" + f);
  } else {
    LOOM_CHECK(fs::exists(dir + "/model.safetensors"))
        << "hf import: " << dir << " has neither model.safetensors nor "
        << "model.safetensors.index.json";
    files.push_back(dir + "/model.safetensors");
  }
  std::map<std::string, Tensor> out;
  for (const std::string& f : files)
    for (auto& [name, t] : load_safetensors(f).tensors) {
      LOOM_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16)
          << "hf import: " << f << ": " << name << " is " << dtype_name(t.dtype())
          << " (expected a floating-point tensor)";
      LOOM_CHECK(out.emplace(name, to_dtype(t, DType::F32)).second)
          << "hf import: " << name << " is in two shards of " << dir;
    }
  return out;
}

// config.json against the model the run builds: each key that decides a shape or the function.
void check_hf_config(const std::string& dir, const models::GptConfig& c) {
  const Json j = read_json_file(dir + "/config.json");
  const std::string want = c.is_llama() ? "LlamaForCausalLM" : "GPT2LMHeadModel";
  const Json* arch = j.find("architectures");
  const std::string got =
      arch && arch->is_array() && !arch->as_array().empty() ? arch->as_array()[0].as_string() : "";
  LOOM_CHECK(got == want) << "hf import: " << dir << "/config.json: architecture '" << got
                          << "', but model.style \"" << c.style << "\" is " << want;
  const Json expected = hf_config(c, DType::F32);
  // transformers 5 writes RoPE's settings as rope_parameters; plain RoPE only.
  const Json* rope = j.find("rope_parameters");
  if (rope && rope->is_object()) {
    const Json* type = rope->find("rope_type");
    LOOM_CHECK(!type || type->as_string() == "default")
        << "hf import: " << dir << "/config.json: rope_type '" << type->as_string()
        << "' (Loom's RoPE is the default, unscaled one)";
  }
  for (const auto& [key, value] : expected.items()) {
    if (key == "torch_dtype" || key == "architectures" || key == "bos_token_id" ||
        key == "eos_token_id")
      continue;  // no shape or function depends on them
    const Json* v = j.find(key);
    if (!v && key == "rope_theta" && rope && rope->is_object()) v = rope->find("rope_theta");
    const bool number = value.is_int() || value.is_double();
    const bool same = v && (number ? (v->is_int() || v->is_double()) &&
                                         std::fabs(v->as_double() - value.as_double()) <=
                                             1e-9 * std::fabs(value.as_double())
                                   : *v == value);
    LOOM_CHECK(same) << "hf import: " << dir << "/config.json: " << key << " is "
                     << (v ? v->dump() : std::string("missing")) << ", the run's model needs "
                     << value.dump();
  }
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> import_hf(const std::string& dir,
                                                      const models::GptConfig& c) {
  check_hf_config(dir, c);
  std::map<std::string, Tensor> hf = read_hf_tensors(dir);
  auto take = [&](const std::string& name) {
    auto it = hf.find(name);
    LOOM_CHECK(it != hf.end()) << "hf import: " << dir << " has no tensor " << name;
    Tensor t = it->second;
    hf.erase(it);
    return t;
  };
  // The export's mapping run backwards: Loom's names from a model of config c, each tensor
  // from the Hugging Face tensors it was made of.
  std::map<std::string, Tensor> loom_shapes;
  for (const auto& p : models::Gpt(c).named_parameters()) loom_shapes[p.name] = p.tensor;
  std::vector<std::pair<std::string, Tensor>> out;
  auto put = [&](const std::string& name, const Tensor& t) {
    auto it = loom_shapes.find(name);
    LOOM_CHECK(it != loom_shapes.end() && it->second.shape() == t.shape())
        << "hf import: " << dir << ": the tensor for " << name << " has shape " << t.shape()
        << ", the run's model needs "
        << (it == loom_shapes.end() ? std::string("none") : shape_str(it->second.shape()));
    out.emplace_back(name, t);
  };
  const int64_t q = c.heads * c.head_dim(), kv = c.num_kv_heads() * c.head_dim();
  if (!c.is_llama()) {
    auto conv1d = [&](const std::string& name) { return contiguous(transpose(take(name), 0, 1)); };
    put("tok_embed.weight", take("transformer.wte.weight"));
    put("pos_embed.weight", take("transformer.wpe.weight"));
    for (int64_t i = 0; i < c.depth; ++i) {
      const std::string l = "blocks." + std::to_string(i) + ".",
                        h = "transformer.h." + std::to_string(i) + ".";
      for (const char* p : {"weight", "bias"}) {
        put(l + "norm1." + p, take(h + "ln_1." + p));
        put(l + "norm2." + p, take(h + "ln_2." + p));
      }
      for (const auto& [loom, name] :
           std::vector<std::pair<std::string, std::string>>{{"attn.qkv", "attn.c_attn"},
                                                            {"attn.proj", "attn.c_proj"},
                                                            {"mlp.fc1", "mlp.c_fc"},
                                                            {"mlp.fc2", "mlp.c_proj"}}) {
        put(l + loom + ".weight", conv1d(h + name + ".weight"));
        put(l + loom + ".bias", take(h + name + ".bias"));
      }
    }
    put("norm_f.weight", take("transformer.ln_f.weight"));
    put("norm_f.bias", take("transformer.ln_f.bias"));
  } else {
    put("tok_embed.weight", take("model.embed_tokens.weight"));
    for (int64_t i = 0; i < c.depth; ++i) {
      const std::string l = "blocks." + std::to_string(i) + ".",
                        h = "model.layers." + std::to_string(i) + ".";
      put(l + "norm1.weight", take(h + "input_layernorm.weight"));
      const Tensor wq = take(h + "self_attn.q_proj.weight"),
                   wk = take(h + "self_attn.k_proj.weight"),
                   wv = take(h + "self_attn.v_proj.weight");
      LOOM_CHECK(wq.size(0) == q && wk.size(0) == kv && wv.size(0) == kv)
          << "hf import: " << dir << ": layer " << i << "'s q/k/v projections have " << wq.size(0)
          << "/" << wk.size(0) << "/" << wv.size(0) << " rows, the run's model " << q << "/" << kv
          << "/" << kv;
      put(l + "attn.qkv.weight", cat({wq, wk, wv}, 0));
      put(l + "attn.proj.weight", take(h + "self_attn.o_proj.weight"));
      put(l + "norm2.weight", take(h + "post_attention_layernorm.weight"));
      put(l + "mlp.w1.weight", take(h + "mlp.gate_proj.weight"));
      put(l + "mlp.w3.weight", take(h + "mlp.up_proj.weight"));
      put(l + "mlp.w2.weight", take(h + "mlp.down_proj.weight"));
    }
    put("norm_f.weight", take("model.norm.weight"));
  }
  if (!c.tie_embeddings) put("lm_head.weight", take("lm_head.weight"));
  // A tied model's file may hold the head as well (transformers writes it): the same values.
  if (c.tie_embeddings) hf.erase("lm_head.weight");
  LOOM_CHECK(hf.empty()) << "hf import: " << dir << ": tensor " << hf.begin()->first
                         << " has no place in the run's model";
  return out;
}

}  // namespace loom::train
