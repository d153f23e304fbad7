// Writes small Loom GPT runs for tests/reference/gpt_reference.py to recompute in PyTorch:
// initial weights, a fixed batch of next-token windows, the step-0 loss and gradients, and the
// losses of 20 training steps on that batch as the GPT recipe (train/recipes/gpt.cpp) takes them
// (cross-entropy, backward, global grad-norm clipping, AdamW with warmup + cosine; see
// reference_driver.h).
//
//   reference_gpt_driver OUT_DIR    ->  OUT_DIR/cases.json, OUT_DIR/<case>/...
//
// Six cases, both styles of models/gpt:
//   gpt2              GPT-2 style (learned positions, LayerNorm, GELU MLP, biases, tied
//                     embedding), weights exactly as init_parameters() leaves them, targets
//                     the next tokens of each window (as the trainer gathers them).
//   llama             Llama style (RoPE, RMSNorm, SwiGLU, no biases, untied head) with
//                     grouped-query attention (2 kv heads for 4 query heads), likewise.
//   gpt2_perturbed,   the same, with every parameter that init leaves constant (norm weights
//   llama_perturbed   at 1, biases at 0) moved by N(0, 0.3^2), so a norm's scale or shift, or a
//                     bias, that is dropped or misapplied changes the step-0 loss; and a few
//                     targets set to the ignore index -100, which the mean must skip.
//   llama_moe         a mixture of experts (nn/moe.h) in every block: softmax top-2 of 4
//                     SwiGLU experts, renormalised, one shared expert, the Switch and z losses.
//   gpt2_moe          one in every second block: sigmoid top-2 of 4 GELU experts, selection
//                     biases that change which experts are chosen (never the gates).
// The balancing losses add to the gradients, not to the loss value (nn::MoE attaches them).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "loom/models/gpt/gpt.h"
#include "reference_driver.h"

namespace {

using namespace loom;

constexpr uint64_t kSeed = 4321;
constexpr int64_t kSeq = 16;  // tokens per window (= the context)

models::GptConfig gpt2_config() {
  models::GptConfig c = models::GptConfig::gpt2();
  c.vocab_size = 96;
  c.context = kSeq;
  c.width = 48;
  c.depth = 2;
  c.heads = 4;  // head dim 12
  c.mlp_ratio = 4.0;
  return c;
}

models::GptConfig llama_config() {
  models::GptConfig c = models::GptConfig::llama();
  c.vocab_size = 128;
  c.context = kSeq;
  c.width = 64;
  c.depth = 2;
  c.heads = 4;     // head dim 16
  c.kv_heads = 2;  // GQA: query heads 2g and 2g+1 share kv head g
  c.rope_theta = 10000.0;
  return c;  // swiglu_hidden 0: 8/3 * 64 rounded up to a multiple of 64 = 192
}

// The training setup of configs/gpt_kjv.toml, scaled to 20 steps: AdamW (beta2 0.95, weight
// decay 0.1), linear warmup then cosine to 0.1 lr, and a gradient-norm clip between the norms
// of the first steps and the last (about 2.2 -> 1.0 here), so both branches of the clip run.
reference::TrainSpec train_spec() {
  reference::TrainSpec spec;
  spec.steps = 20;
  spec.adamw = optim::AdamWConfig{3e-3, 0.9, 0.95, 1e-8, 0.1};
  spec.grad_clip = 1.5;
  spec.schedule.kind = optim::LrSchedule::Kind::Cosine;
  spec.schedule.warmup_steps = 5;
  spec.schedule.min_lr_ratio = 0.1;
  return spec;
}

// Moves every parameter whose elements are all equal (the constant inits) by N(0, 0.3^2).
void perturb_constant_parameters(const nn::Module& model) {
  NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    const std::vector<float> v = to_vector(p.tensor);
    bool constant = true;
    for (float x : v) constant = constant && x == v[0];
    if (constant) fill_normal(p.tensor, RngKey{kSeed, "reference.perturb", p.name}, 0, v[0], 0.3f);
  }
}

models::GptConfig llama_moe_config() {
  models::GptConfig c = llama_config();
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.hidden = 32;
  c.moe.shared_experts = 1;
  c.moe.aux_loss = 0.01;
  c.moe.z_loss = 0.001;
  return c;
}

models::GptConfig gpt2_moe_config() {
  models::GptConfig c = gpt2_config();
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.gating = nn::MoeGating::Sigmoid;
  c.moe.hidden = 48;
  c.moe.every = 2;
  c.moe.aux_loss = 0.05;
  c.moe.z_loss = 0.01;
  return c;
}

// Selection biases of about the spread of the router's scores, so that they change choices.
void set_selection_biases(nn::Module& model) {
  const std::vector<float> bias = {0.02f, -0.03f, 0.05f, 0.0f};
  for (auto& [path, moe] : nn::moe_layers(model)) moe->selection_bias = bias;
}

Json moe_json(const models::GptConfig& c, nn::Module& model) {
  if (!c.moe.enabled()) return Json();
  const nn::MoeConfig m = c.moe_config();
  Json biases = Json::object();
  for (auto& [path, moe] : nn::moe_layers(model)) {
    Json b = Json::array();
    for (float v : moe->selection_bias) b.push_back(double(v));
    biases.set(path, b);
  }
  return Json::object({{"experts", m.experts},
                       {"top_k", m.top_k},
                       {"gating", m.gating == nn::MoeGating::Softmax ? "softmax" : "sigmoid"},
                       {"renormalize", m.renormalize},
                       {"hidden", m.hidden},
                       {"shared_experts", m.shared_experts},
                       {"aux_loss", m.aux_loss},
                       {"z_loss", m.z_loss},
                       {"every", m.every},
                       {"selection_bias", biases}});
}

Json config_json(const models::GptConfig& c, nn::Module& model) {
  return Json::object({{"moe", moe_json(c, model)},
                       {"style", models::name_of(c.style)},
                       {"vocab_size", c.vocab_size},
                       {"context", c.context},
                       {"width", c.width},
                       {"depth", c.depth},
                       {"heads", c.heads},
                       {"kv_heads", c.kv_heads},
                       {"mlp_ratio", c.mlp_ratio},
                       {"rope_theta", c.rope_theta},
                       {"tie_embeddings", c.tie_embeddings},
                       {"swiglu_hidden", c.swiglu_hidden}});
}

void write_case(const std::string& out, const std::string& name, const models::GptConfig& c,
                int64_t batch, bool perturb) {
  const std::string dir = out + "/" + name;
  models::Gpt model(c);
  model.init_parameters(kSeed);
  if (perturb) perturb_constant_parameters(model);
  if (c.moe.enabled() && c.moe.gating == nn::MoeGating::Sigmoid) set_selection_biases(model);

  // The fixed batch: B windows of T + 1 uniform random tokens; ids are the first T, targets the
  // last T (train/recipes/gpt.cpp: gather_windows).
  const int64_t B = batch, T = kSeq;
  Tensor u = Tensor::empty({B, T + 1});
  fill_uniform(u, RngKey{kSeed, "reference.tokens", name});
  const std::vector<float> uv = to_vector(u);
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      auto token = [&](int64_t i) {
        return std::min<int64_t>(int64_t(uv[size_t(b * (T + 1) + i)] * float(c.vocab_size)),
                                 c.vocab_size - 1);
      };
      ids.push_back(token(t));
      targets.push_back(token(t + 1));
    }
  if (perturb) {
    // Ignored targets: the first three of window 0 (a prompt) and the last of window 1.
    for (int64_t t = 0; t < 3; ++t) targets[size_t(t)] = -100;
    targets[size_t(T + T - 1)] = -100;
  }
  Tensor ids_t = from_vector(ids, {B, T}), targets_t = from_vector(targets, {B, T});
  write_npy(dir + "/ids.npy", ids_t);
  write_npy(dir + "/targets.npy", targets_t);

  auto loss = [&]() { return model.loss(ids_t, targets_t); };

  Json meta =
      Json::object({{"model", "gpt"},
                    {"case", name},
                    {"seed", kSeed},
                    {"config", config_json(c, model)},
                    {"batch", Json::object({{"ids", "ids.npy"}, {"targets", "targets.npy"}})}});
  reference::write_reference_case(dir, model, meta, loss, train_spec());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string out = argv[1];
    struct Case {
      const char* name;
      models::GptConfig config;
      int64_t batch;
      bool perturb;
    };
    const std::vector<Case> cases = {
        {"gpt2", gpt2_config(), 4, false},           {"llama", llama_config(), 3, false},
        {"gpt2_perturbed", gpt2_config(), 4, true},  {"llama_perturbed", llama_config(), 3, true},
        {"llama_moe", llama_moe_config(), 3, false}, {"gpt2_moe", gpt2_moe_config(), 4, false}};
    Json names = Json::array();
    for (const Case& k : cases) {
      std::filesystem::create_directories(out + "/" + k.name);
      write_case(out, k.name, k.config, k.batch, k.perturb);
      names.push_back(k.name);
    }
    write_json_file(out + "/cases.json", Json::object({{"model", "gpt"}, {"cases", names}}));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reference_gpt_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
