#include "loom/train/recipes/gpt_hf.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/core/atomic_file.h"
#include "loom/core/json_file.h"
#include "loom/data/text.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer_files.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"

namespace loom::train {

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// One Loom parameter and the Hugging Face tensor(s) it is: the same values, the transpose
// (GPT-2's Conv1D weights are (in, out)), or its rows split in parts (Llama's q, k, v).
struct NameMap {
  NameMap(std::string l, std::vector<std::string> h, bool t = false, std::vector<int64_t> r = {})
      : loom(std::move(l)), hf(std::move(h)), transposed(t), rows(std::move(r)) {}
  std::string loom;
  std::vector<std::string> hf;
  bool transposed;
  std::vector<int64_t> rows;  // with several hf tensors: each one's rows
};

std::vector<NameMap> name_maps(const models::GptConfig& c) {
  LOOM_CHECK(!c.moe.enabled())
      << "Hugging Face interop: this GPT is a mixture of experts (moe.experts " << c.moe.experts
      << "), which has no GPT2LMHeadModel or LlamaForCausalLM layout; only dense models "
      << "convert";
  std::vector<NameMap> m;
  if (!c.is_llama()) {
    m.push_back({"tok_embed.weight", {"transformer.wte.weight"}});
    m.push_back({"pos_embed.weight", {"transformer.wpe.weight"}});
    for (int64_t i = 0; i < c.depth; ++i) {
      const std::string l = "blocks." + std::to_string(i) + ".",
                        h = "transformer.h." + std::to_string(i) + ".";
      for (const char* p : {".weight", ".bias"}) {
        m.push_back({l + "norm1" + p, {h + "ln_1" + p}});
        m.push_back({l + "norm2" + p, {h + "ln_2" + p}});
      }
      for (const auto& [loom, hf] :
           std::vector<std::pair<std::string, std::string>>{{"attn.qkv", "attn.c_attn"},
                                                            {"attn.proj", "attn.c_proj"},
                                                            {"mlp.fc1", "mlp.c_fc"},
                                                            {"mlp.fc2", "mlp.c_proj"}}) {
        m.push_back({l + loom + ".weight", {h + hf + ".weight"}, /*transposed=*/true});
        m.push_back({l + loom + ".bias", {h + hf + ".bias"}});
      }
    }
    m.push_back({"norm_f.weight", {"transformer.ln_f.weight"}});
    m.push_back({"norm_f.bias", {"transformer.ln_f.bias"}});
  } else {
    const int64_t q = c.heads * c.head_dim(), kv = c.num_kv_heads() * c.head_dim();
    m.push_back({"tok_embed.weight", {"model.embed_tokens.weight"}});
    for (int64_t i = 0; i < c.depth; ++i) {
      const std::string l = "blocks." + std::to_string(i) + ".",
                        h = "model.layers." + std::to_string(i) + ".";
      m.push_back({l + "norm1.weight", {h + "input_layernorm.weight"}});
      m.emplace_back(NameMap{l + "attn.qkv.weight",  // rows: the q heads, then k, then v
                             {h + "self_attn.q_proj.weight", h + "self_attn.k_proj.weight",
                              h + "self_attn.v_proj.weight"},
                             false,
                             {q, kv, kv}});
      m.push_back({l + "attn.proj.weight", {h + "self_attn.o_proj.weight"}});
      m.push_back({l + "norm2.weight", {h + "post_attention_layernorm.weight"}});
      m.emplace_back(
          NameMap{l + "mlp.w1.weight", {h + "mlp.gate_proj.weight"}});  // silu(w1 x) * w3 x
      m.push_back({l + "mlp.w3.weight", {h + "mlp.up_proj.weight"}});
      m.push_back({l + "mlp.w2.weight", {h + "mlp.down_proj.weight"}});
    }
    m.push_back({"norm_f.weight", {"model.norm.weight"}});
  }
  if (!c.tie_embeddings) m.push_back({"lm_head.weight", {"lm_head.weight"}});
  return m;
}

// Takes `name` out of `tensors`; `what` says where it was looked for.
Tensor take(std::map<std::string, Tensor>& tensors, const std::string& name,
            const std::string& what) {
  auto it = tensors.find(name);
  LOOM_CHECK(it != tensors.end()) << what << " has no tensor " << name;
  Tensor t = it->second;
  tensors.erase(it);
  return t;
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
  const Config cfg = run_config_of(ckpt_dir, ModelKind::Gpt, "ckpt export --format hf");
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : CheckpointReader(ckpt_dir).read_all("model")) weights[name] = t;
  Named tensors;
  for (const NameMap& m : name_maps(cfg.gpt())) {
    const Tensor t = take(weights, m.loom, "hf export: the checkpoint");
    if (m.hf.size() == 1) {
      tensors.emplace_back(m.hf[0], m.transposed ? contiguous(transpose(t, 0, 1)) : t);
      continue;
    }
    int64_t row = 0;
    for (size_t k = 0; k < m.hf.size(); row += m.rows[k], ++k)
      tensors.emplace_back(m.hf[k], contiguous(narrow(t, 0, row, m.rows[k])));
  }
  LOOM_CHECK(weights.empty()) << "hf export: " << weights.begin()->first
                              << " has no Hugging Face name (a model this export does not know)";
  HfExport result;
  result.architecture = cfg.gpt().is_llama() ? "LlamaForCausalLM" : "GPT2LMHeadModel";
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
  write_json_file(out_dir + "/config.json", hf_config(cfg.gpt(), dtype));
  // The run's tokenizer goes with it: a tokenizer.json as it was given, any other written as one.
  const std::string run_dir = std::filesystem::path(ckpt_dir).parent_path().string();
  const Tokenizer tok = read_tokenizer(cfg.data.tokenizer, cfg.data.tokenizer_pattern, run_dir);
  if (tok.files.size() == 1 && std::filesystem::path(tok.files[0]).extension() == ".json")
    write_file_atomic(out_dir + "/tokenizer.json", read_text_file(tok.files[0]));
  else
    write_tokenizer_json(tok.bpe, out_dir + "/tokenizer.json");
  Json tok_config = Json::object(
      {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", cfg.gpt().context}});
  if (const int32_t eot = tok.bpe.special_id("<|endoftext|>"); eot >= 0)
    for (const char* role : {"bos_token", "eos_token"}) tok_config.set(role, "<|endoftext|>");
  write_json_file(out_dir + "/tokenizer_config.json", tok_config);
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
                          << "', but model.style \"" << models::name_of(c.style) << "\" is "
                          << want;
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
  std::map<std::string, Shape> shapes;  // of the run's model
  for (const auto& p : models::Gpt(c).named_parameters()) shapes[p.name] = p.tensor.shape();
  std::vector<std::pair<std::string, Tensor>> out;
  for (const NameMap& m : name_maps(c)) {  // the export's mapping, run backwards
    std::vector<Tensor> parts;
    for (const std::string& name : m.hf) parts.push_back(take(hf, name, "hf import: " + dir));
    const Tensor t = m.hf.size() > 1 ? cat(parts, 0)
                     : m.transposed  ? contiguous(transpose(parts[0], 0, 1))
                                     : parts[0];
    LOOM_CHECK(t.shape() == shapes.at(m.loom))
        << "hf import: " << dir << ": " << m.hf[0] << (m.hf.size() > 1 ? " (with the others)" : "")
        << " makes " << m.loom << " of shape " << t.shape() << ", the run's model needs "
        << shapes.at(m.loom);
    out.emplace_back(m.loom, t);
  }
  // A tied model's file may hold the head as well (transformers writes it): the same values.
  if (c.tie_embeddings) hf.erase("lm_head.weight");
  LOOM_CHECK(hf.empty()) << "hf import: " << dir << ": tensor " << hf.begin()->first
                         << " has no place in the run's model";
  return out;
}

}  // namespace loom::train
