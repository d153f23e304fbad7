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
// (GPT-2's Conv1D weights are (in, out)), its rows split in parts (Llama's q, k, v), or the
// stack of them along a first dimension (a mixture's experts, one tensor each in Mixtral's).
struct NameMap {
  NameMap(std::string l, std::vector<std::string> h, bool t = false, std::vector<int64_t> r = {})
      : loom(std::move(l)), hf(std::move(h)), transposed(t), rows(std::move(r)) {}
  std::string loom;
  std::vector<std::string> hf;
  bool transposed;
  std::vector<int64_t> rows;  // with several hf tensors: each one's rows
  bool stacked = false;       // with several hf tensors: each one an index of the first dim
};

// A mixture Mixtral computes: softmax over every expert, the top k renormalised, SwiGLU experts,
// no shared experts, no selection bias, a mixture in every block.
void check_mixtral_layout(const models::GptConfig& c) {
  const nn::MoeConfig& m = c.moe;
  LOOM_CHECK(c.is_llama() && m.gating == nn::MoeGating::Softmax && m.renormalize &&
             m.shared_experts == 0 && m.bias_rate == 0 && m.every == 1)
      << "Hugging Face interop: this mixture of experts (moe.gating "
      << (m.gating == nn::MoeGating::Softmax ? "softmax" : "sigmoid") << ", renormalize "
      << m.renormalize << ", shared_experts " << m.shared_experts << ", bias_rate " << m.bias_rate
      << ", every " << m.every << ", model.style \"" << models::name_of(c.style)
      << "\") is not MixtralForCausalLM's: llama style, softmax gating renormalised over the top "
      << "k, no shared experts, no selection bias, a mixture in every block";
  LOOM_CHECK(!c.qkv_bias) << "Hugging Face interop: MixtralForCausalLM has no q, k, v biases "
                          << "(model.qkv_bias)";
}

std::vector<NameMap> name_maps(const models::GptConfig& c) {
  if (c.moe.enabled()) check_mixtral_layout(c);
  LOOM_CHECK(c.is_llama() || c.window == 0)
      << "Hugging Face interop: GPT2LMHeadModel has no sliding window (model.sliding_window "
      << c.window << "); a llama-style model converts as MistralForCausalLM";
  LOOM_CHECK(!c.is_mla()) << "Hugging Face interop: this GPT has latent attention (model."
                          << "mla_kv_rank " << c.mla_kv_rank << "); DeepSeek-V2's layout is not "
                          << "one Loom converts";
  LOOM_CHECK(!c.has_ssm())
      << "Hugging Face interop: this GPT has Mamba-2 blocks (model.mixers \"" << c.mixers
      << "\"), which GPT2LMHeadModel, LlamaForCausalLM and Qwen2ForCausalLM do not have; only "
      << "attention models convert";
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
      if (c.qkv_bias)  // Qwen2
        m.emplace_back(NameMap{
            l + "attn.qkv.bias",
            {h + "self_attn.q_proj.bias", h + "self_attn.k_proj.bias", h + "self_attn.v_proj.bias"},
            false,
            {q, kv, kv}});
      m.push_back({l + "attn.proj.weight", {h + "self_attn.o_proj.weight"}});
      m.push_back({l + "norm2.weight", {h + "post_attention_layernorm.weight"}});
      if (c.moe.enabled()) {  // Mixtral's: the router, then each expert's w1, w3, w2
        const std::string e = h + "block_sparse_moe.";
        m.push_back({l + "mlp.router.weight", {e + "gate.weight"}});
        for (const char* w : {"w1", "w3", "w2"}) {
          NameMap experts{l + "mlp." + w, {}};
          for (int64_t k = 0; k < c.moe.experts; ++k)
            experts.hf.push_back(e + "experts." + std::to_string(k) + "." + w + ".weight");
          experts.stacked = true;
          m.push_back(std::move(experts));
        }
        continue;
      }
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

// The transformers class of a GPT: GPT-2's, Llama's, Mistral's (Llama with a sliding window),
// Qwen2's (Llama with q, k, v biases) or Mixtral's (Llama with a mixture in every block).
const char* hf_architecture(const models::GptConfig& c) {
  if (!c.is_llama()) return "GPT2LMHeadModel";
  if (c.moe.enabled()) return "MixtralForCausalLM";
  if (c.qkv_bias) return "Qwen2ForCausalLM";
  return c.window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM";
}

// The sliding window as Mistral and Mixtral write it: its width, or null for none.
Json window_of(const models::GptConfig& c) {
  return c.window > 0 ? Json(c.window) : Json(nullptr);
}

// config.json for the GPT's architecture; `mistral`: as MistralForCausalLM also when Loom's
// model has no window (sliding_window null), which an import of such a file compares against.
Json hf_config(const models::GptConfig& c, DType dtype, bool mistral = false) {
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
                         {"layer_norm_epsilon", c.norm_epsilon()},
                         {"resid_pdrop", 0.0},
                         {"embd_pdrop", 0.0},
                         {"attn_pdrop", 0.0},
                         {"tie_word_embeddings", c.tie_embeddings},
                         {"bos_token_id", nullptr},  // Loom's GPTs have no special tokens
                         {"eos_token_id", nullptr},
                         {"torch_dtype", torch_dtype}});
  Json llama = Json::object({{"architectures", Json::array({Json(hf_architecture(c))})},
                             {"model_type", c.qkv_bias ? "qwen2" : "llama"},
                             {"vocab_size", c.vocab_size},
                             {"max_position_embeddings", c.context},
                             {"hidden_size", c.width},
                             {"intermediate_size", c.mlp_hidden()},
                             {"num_hidden_layers", c.depth},
                             {"num_attention_heads", c.heads},
                             {"num_key_value_heads", c.num_kv_heads()},
                             {"head_dim", c.head_dim()},
                             {"hidden_act", "silu"},
                             {"rms_norm_eps", c.norm_epsilon()},
                             {"rope_theta", c.rope_theta},
                             {"attention_bias", false},
                             {"mlp_bias", false},
                             {"tie_word_embeddings", c.tie_embeddings},
                             {"bos_token_id", nullptr},
                             {"eos_token_id", nullptr},
                             {"torch_dtype", torch_dtype}});
  if (c.moe.enabled()) {  // Mixtral: no attention_bias, mlp_bias; the experts' settings
    Json mixtral = Json::object();
    for (const auto& [key, value] : llama.items())
      if (key != "attention_bias" && key != "mlp_bias") mixtral.set(key, value);
    mixtral.set("model_type", "mixtral");
    mixtral.set("intermediate_size", c.moe_config().hidden);
    mixtral.set("num_local_experts", c.moe.experts);
    mixtral.set("num_experts_per_tok", c.moe.top_k);
    mixtral.set("sliding_window", window_of(c));
    mixtral.set("router_jitter_noise", 0.0);
    // transformers' balance loss is off unless the router's logits are output; Loom's own
    // (moe.aux_loss) is a setting of the run, not of the weights.
    mixtral.set("output_router_logits", false);
    llama = mixtral;
  } else if (c.qkv_bias) {  // Qwen2: no head_dim, attention_bias, mlp_bias; the window (if
                            // any) in every layer
    Json qwen = Json::object();
    for (const auto& [key, value] : llama.items())
      if (key != "head_dim" && key != "attention_bias" && key != "mlp_bias") qwen.set(key, value);
    qwen.set("use_sliding_window", c.window > 0);
    if (c.window > 0) {  // layers from max_window_layers on slide
      qwen.set("sliding_window", c.window);
      qwen.set("max_window_layers", 0);
    }
    Json::Array layers;
    for (int64_t i = 0; i < c.depth; ++i)
      layers.push_back(Json(c.window > 0 ? "sliding_attention" : "full_attention"));
    qwen.set("layer_types", Json::array(std::move(layers)));
    llama = qwen;
  } else if (c.window > 0 || mistral) {  // Mistral: Llama's blocks, no attention_bias, mlp_bias
    Json m = Json::object();
    for (const auto& [key, value] : llama.items())
      if (key != "attention_bias" && key != "mlp_bias") m.set(key, value);
    m.set("architectures", Json::array({Json("MistralForCausalLM")}));
    m.set("model_type", "mistral");
    m.set("sliding_window", window_of(c));
    llama = m;
  }
  const RopeScaling& rs = c.rope_scaling;
  if (rs.factor != 1 && rs.linear)  // position interpolation, as transformers 5 writes it
    llama.set("rope_parameters",
              Json::object(
                  {{"rope_type", "linear"}, {"rope_theta", c.rope_theta}, {"factor", rs.factor}}));
  else if (rs.factor != 1)  // Llama 3.x's scaled RoPE, as transformers 5 writes it
    llama.set("rope_parameters",
              Json::object({{"rope_type", "llama3"},
                            {"rope_theta", c.rope_theta},
                            {"factor", rs.factor},
                            {"low_freq_factor", rs.low_freq_factor},
                            {"high_freq_factor", rs.high_freq_factor},
                            {"original_max_position_embeddings", rs.original_context}}));
  return llama;
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
    if (m.stacked) {
      for (size_t k = 0; k < m.hf.size(); ++k)
        tensors.emplace_back(m.hf[k], contiguous(squeeze(narrow(t, 0, int64_t(k), 1), 0)));
      continue;
    }
    int64_t row = 0;
    for (size_t k = 0; k < m.hf.size(); row += m.rows[k], ++k)
      tensors.emplace_back(m.hf[k], contiguous(narrow(t, 0, row, m.rows[k])));
  }
  LOOM_CHECK(weights.empty()) << "hf export: " << weights.begin()->first
                              << " has no Hugging Face name (a model this export does not know)";
  HfExport result;
  result.architecture = hf_architecture(cfg.gpt());
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

// The fields of a GPT2LMHeadModel's or LlamaForCausalLM's config.json that do not change the
// function the model computes in training, so an import ignores them (docs/interop.md lists
// them): bookkeeping, generation and special-token settings, the initialisation's scale,
// dropout (Loom trains without it: said once), GPT-2's sequence-classification head, and ways
// of computing the same function (f32 attention scores, Llama's pretraining_tp split).
const std::set<std::string> kIgnoredHfFields = {"transformers_version",
                                                "_name_or_path",
                                                "torch_dtype",
                                                "dtype",
                                                "model_type",
                                                "bos_token_id",
                                                "eos_token_id",
                                                "pad_token_id",
                                                "use_cache",
                                                "initializer_range",
                                                "task_specific_params",
                                                "output_attentions",
                                                "output_hidden_states",
                                                "return_dict",
                                                "resid_pdrop",
                                                "embd_pdrop",
                                                "attn_pdrop",
                                                "attention_dropout",
                                                "summary_first_dropout",
                                                "summary_type",
                                                "summary_use_proj",
                                                "summary_activation",
                                                "summary_proj_to_labels",
                                                "reorder_and_upcast_attn",
                                                "pretraining_tp",
                                                "gradient_checkpointing"};
const char* const kDropoutFields[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop",
                                      "attention_dropout", "summary_first_dropout"};

// config.json against the model the run builds: every field that changes the function must
// hold the run's model's value (or the one that computes the same), every other field must be
// one known not to change it; anything else is refused naming the field.
void check_hf_config(const std::string& dir, const models::GptConfig& c) {
  const std::string where = "hf import: " + dir + "/config.json: ";
  const Json j = read_json_file(dir + "/config.json");
  const std::string want = hf_architecture(c);
  const Json* arch = j.find("architectures");
  const std::string got =
      arch && arch->is_array() && !arch->as_array().empty() ? arch->as_array()[0].as_string() : "";
  // A Mistral without a window (sliding_window null, as from Mistral 7B v0.2 on) computes
  // Llama's function: the fields are compared as a windowless Mistral's.
  const bool windowless_mistral = got == "MistralForCausalLM" && want == "LlamaForCausalLM";
  LOOM_CHECK(got == want || windowless_mistral)
      << where << "architecture '" << got << "', but model.style \"" << models::name_of(c.style)
      << "\"" << (c.qkv_bias ? " with qkv_bias" : "")
      << (c.window > 0 ? " with sliding_window" : "") << " is " << want;
  const Json expected = hf_config(c, DType::F32, windowless_mistral);
  auto is = [](const Json* v, const Json& value) {
    const bool number = value.is_int() || value.is_double();
    return v && (number ? (v->is_int() || v->is_double()) &&
                              std::fabs(v->as_double() - value.as_double()) <=
                                  1e-9 * std::fabs(value.as_double())
                        : *v == value);
  };
  // RoPE: transformers 5 writes rope_parameters, earlier ones rope_theta and rope_scaling (null
  // when unscaled). The default RoPE, Llama 3.x's scaling or linear scaling (position
  // interpolation), with the run's model's settings.
  const RopeScaling& rs = c.rope_scaling;
  bool file_scaled = false;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const Json* rope = j.find(key);
    if (!rope || rope->is_null()) continue;
    LOOM_CHECK(rope->is_object()) << where << key << " is " << rope->dump();
    const Json* type = rope->find("rope_type");
    if (!type) type = rope->find("type");
    const std::string rope_type = type ? type->as_string() : "default";
    LOOM_CHECK(rope_type == "default" || rope_type == "llama3" || rope_type == "linear")
        << where << key << ".rope_type '" << rope_type << "': Loom's RoPE is the default one, "
        << "Llama 3.x's (llama3) or linear; another would change every position's rotation";
    std::set<std::string> fields = {"rope_type", "type", "rope_theta"};
    if (rope_type == "linear") {
      file_scaled = true;
      fields.insert("factor");
      const Json* v = rope->find("factor");
      LOOM_CHECK(c.is_llama() && rs.factor != 1 && rs.linear && is(v, Json(rs.factor)))
          << where << key << ".rope_type 'linear' with factor "
          << (v ? v->dump() : std::string("missing")) << ": the run's model needs "
          << "model.rope_scaling_type \"linear\" and model.rope_scaling_factor equal to it";
    }
    if (rope_type == "llama3") {
      file_scaled = true;
      LOOM_CHECK(c.is_llama() && rs.factor != 1 && !rs.linear)
          << where << key << ".rope_type 'llama3': the run's model does not scale its RoPE (set "
          << "model.rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor and "
          << "rope_original_context to the file's)";
      const std::pair<const char*, double> wanted[] = {
          {"factor", rs.factor},
          {"low_freq_factor", rs.low_freq_factor},
          {"high_freq_factor", rs.high_freq_factor},
          {"original_max_position_embeddings", rs.original_context}};
      for (const auto& [field, want] : wanted) {
        fields.insert(field);
        const Json* v = rope->find(field);
        LOOM_CHECK(is(v, Json(want)))
            << where << key << "." << field << " is " << (v ? v->dump() : std::string("missing"))
            << ", the run's model needs " << want;
      }
    }
    for (const auto& [field, value] : rope->items())
      LOOM_CHECK(fields.count(field)) << where << key << "." << field << " is " << value.dump()
                                      << ": Loom's RoPE does not take it";
  }
  LOOM_CHECK(file_scaled || rs.factor == 1)
      << where << "an unscaled RoPE, but the run's model scales it (model.rope_scaling_factor "
      << rs.factor << ")";
  std::set<std::string> checked = {"architectures", "rope_parameters", "rope_scaling"};
  // Qwen2's window settings do nothing while use_sliding_window is false (checked below; with a
  // window they are compared too).
  if (c.qkv_bias) checked.insert({"sliding_window", "max_window_layers"});
  // Mixtral's balance-loss weight only weighs a loss transformers adds with output_router_logits
  // (which must be false: checked with the others below).
  if (c.moe.enabled()) checked.insert("router_aux_loss_coef");
  for (const auto& [key, value] : expected.items()) {
    if (key == "resid_pdrop" || key == "embd_pdrop" || key == "attn_pdrop") continue;  // below
    checked.insert(key);
    if (key == "torch_dtype" || key == "architectures" || key == "bos_token_id" ||
        key == "eos_token_id" || key == "rope_parameters")
      continue;  // no shape or function depends on them (RoPE's: above)
    const Json* v = j.find(key);
    if (!v && key == "rope_theta")
      if (const Json* rope = j.find("rope_parameters"); rope && rope->is_object())
        v = rope->find("rope_theta");
    // transformers' defaults where a field is absent or null: GPT-2's MLP is 4 x n_embd wide,
    // Llama's head_dim hidden_size / num_attention_heads (Loom's own).
    if ((!v || v->is_null()) && key == "n_inner" && c.mlp_hidden() == 4 * c.width) continue;
    if ((!v || v->is_null()) && key == "head_dim") continue;
    if (!v && key == "rope_theta" && c.rope_theta == 10000.0) continue;
    if (!v && (key == "attention_bias" || key == "mlp_bias")) continue;  // false by default
    LOOM_CHECK(is(v, value)) << where << key << " is " << (v ? v->dump() : std::string("missing"))
                             << ", the run's model needs " << value.dump();
  }
  // GPT-2's switches of its attention, as Loom computes it.
  const std::pair<const char*, Json> gpt2_attention[] = {
      {"scale_attn_weights", Json(true)},
      {"scale_attn_by_inverse_layer_idx", Json(false)},
      {"add_cross_attention", Json(false)},
      {"n_ctx", Json(c.context)}};
  for (const auto& [key, value] : gpt2_attention) {
    if (c.is_llama()) break;
    checked.insert(key);
    const Json* v = j.find(key);
    LOOM_CHECK(!v || v->is_null() || is(v, value))
        << where << key << " is " << v->dump() << ": Loom's GPT-2 computes " << value.dump();
  }
  std::vector<std::string> dropout;
  for (const auto& [key, value] : j.items()) {
    if (checked.count(key)) continue;
    LOOM_CHECK(kIgnoredHfFields.count(key))
        << where << "field " << key << " (" << value.dump() << ") is not one Loom knows: it may "
        << "change the model, so the import stops (docs/interop.md lists the fields read and "
        << "those ignored)";
    for (const char* d : kDropoutFields)
      if (key == d && (value.is_int() || value.is_double()) && value.as_double() > 0)
        dropout.push_back(key + "=" + value.dump());
  }
  if (!dropout.empty()) {
    std::string list;
    for (const std::string& d : dropout) list += (list.empty() ? "" : ", ") + d;
    std::printf("hf import: %s sets dropout (%s); Loom trains without dropout\n", dir.c_str(),
                list.c_str());
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
    const Tensor t = m.stacked         ? stack(parts, 0)
                     : m.hf.size() > 1 ? cat(parts, 0)
                     : m.transposed    ? contiguous(transpose(parts[0], 0, 1))
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
