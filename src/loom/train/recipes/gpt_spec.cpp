// The GPT's spec (train/model_spec.h): a decoder-only language model in GPT-2 or Llama style
// ([model], [data], [eval], [sample] keys below), its step's cost, and `loom bench`'s
// synthetic step.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/core/json_file.h"
#include "loom/models/gpt/gpt.h"
#include "loom/ops/detail.h"
#include "loom/ops/shape.h"
#include "loom/train/config.h"
#include "loom/train/config_read.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/gpt.h"
#include "loom/train/recipes/gpt_hf.h"
#include "loom/train/recipes/specs.h"

namespace loom::train {

namespace {

void read_gpt(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  auto& g = c.model.emplace<models::GptConfig>();
  c.train.init_from = f.get_string("train", "init_from", "");
  g.style = choice(f, "model", "style", name_of(g.style), models::gpt_style_from_name);
  g.vocab_size = f.get_int("model", "vocab_size", g.vocab_size);
  g.context = f.get_int("model", "context", g.context);
  g.width = f.get_int("model", "width", g.width);
  g.depth = f.get_int("model", "depth", g.depth);
  g.heads = f.get_int("model", "heads", g.heads);
  g.kv_heads = f.get_int("model", "kv_heads", g.kv_heads);
  g.mlp_ratio = f.get_double("model", "mlp_ratio", g.mlp_ratio);
  g.rope_theta = f.get_double("model", "rope_theta", g.rope_theta);
  RopeScaling& rs = g.rope_scaling;  // Llama 3.x's (Hugging Face's rope_type "llama3")
  rs.factor = f.get_double("model", "rope_scaling_factor", rs.factor);
  const std::string rope_type = f.get_string("model", "rope_scaling_type", "llama3");
  LOOM_CHECK(rope_type == "llama3" || rope_type == "linear")
      << "config " << path << ": model.rope_scaling_type \"" << rope_type
      << "\" is not \"llama3\" or \"linear\"";
  rs.linear = rope_type == "linear";
  rs.low_freq_factor = f.get_double("model", "rope_low_freq_factor", rs.low_freq_factor);
  rs.high_freq_factor = f.get_double("model", "rope_high_freq_factor", rs.high_freq_factor);
  rs.original_context = f.get_double("model", "rope_original_context", rs.original_context);
  // The style's convention (GptConfig::llama unties the head) unless the config says otherwise.
  g.tie_embeddings = f.get_bool("model", "tie_embeddings", !g.is_llama());
  g.swiglu_hidden = f.get_int("model", "swiglu_hidden", g.swiglu_hidden);
  g.norm_eps = f.get_double("model", "norm_eps", g.norm_eps);
  g.qkv_bias = f.get_bool("model", "qkv_bias", g.qkv_bias);
  g.window = f.get_int("model", "sliding_window", g.window);
  g.mla_kv_rank = f.get_int("model", "mla_kv_rank", g.mla_kv_rank);
  g.mla_q_rank = f.get_int("model", "mla_q_rank", g.mla_q_rank);
  g.mla_rope_dim = f.get_int("model", "mla_rope_dim", g.mla_rope_dim);
  g.mixers = f.get_string("model", "mixers", g.mixers);
  if (g.has_ssm()) {  // the ssm_* keys are unknown to a model without Mamba-2 blocks
    nn::Mamba2Config& m = g.ssm;
    m.state = f.get_int("model", "ssm_state", m.state);
    m.head_dim = f.get_int("model", "ssm_head_dim", m.head_dim);
    m.expand = f.get_int("model", "ssm_expand", m.expand);
    m.groups = f.get_int("model", "ssm_groups", m.groups);
    m.conv = f.get_int("model", "ssm_conv", m.conv);
    m.chunk = f.get_int("model", "ssm_chunk", m.chunk);
    const std::string scan = f.get_string("model", "ssm_scan", "chunked");
    LOOM_CHECK(scan == "chunked" || scan == "kernel")
        << "config " << path << ": model.ssm_scan \"" << scan << "\" is not \"chunked\" or "
        << "\"kernel\"";
    m.scan_kernel = scan == "kernel";
  }
  read_moe(f, g.moe);
  g.validate();

  auto& d = c.data;
  d.dataset = dataset_from_name(f.get_string("data", "dataset", "kjv"),
                                {Dataset::Kjv, Dataset::Text, Dataset::Tokens, Dataset::Canvas},
                                "config " + path + ": data.dataset", "gpt");
  if (d.dataset == Dataset::Canvas) {  // the canvases' captions (as a text encoder learns them)
    d.path = f.get_string("data", "path", d.path);
    d.canvases = f.get_int("data", "canvases", d.canvases);
    d.canvas_seed = f.get_int("data", "canvas_seed", d.canvas_seed);
    LOOM_CHECK(d.canvases > 0 && d.canvas_seed >= 0)
        << "config " << path << ": data.canvases must be positive and data.canvas_seed "
        << "non-negative";
  } else {
    d.path = f.get_string("data", "path", "");
  }
  d.val_fraction = f.get_double("data", "val_fraction", d.val_fraction);
  d.tokenizer = f.get_string("data", "tokenizer", d.tokenizer);
  d.tokenizer_pattern = f.get_string("data", "tokenizer_pattern", d.tokenizer_pattern);
  d.cache_dir = f.get_string("data", "cache_dir", d.cache_dir);
  if (d.dataset == Dataset::Tokens) {  // data.paths and data.weights are unknown keys otherwise
    d.paths = f.get_string_list(
        "data", "paths",
        d.path.empty() ? std::vector<std::string>{} : std::vector<std::string>{d.path});
    d.weights = f.get_double_list("data", "weights", std::vector<double>(d.paths.size(), 1.0));
    // (a resolved config holds both, the one directory twice)
    LOOM_CHECK(!d.paths.empty() && (d.path.empty() || d.paths == std::vector<std::string>{d.path}))
        << "config " << path << ": data.dataset \"tokens\" needs data.path (a directory of "
        << "`loom data prepare`) or data.paths (several), not both";
    LOOM_CHECK(d.weights.size() == d.paths.size())
        << "config " << path << ": data.weights has " << d.weights.size() << " entries for "
        << d.paths.size() << " data.paths";
    for (double w : d.weights)
      LOOM_CHECK(w > 0 && std::isfinite(w))
          << "config " << path << ": data.weights must be positive, got " << w;
  }
  if (d.dataset == Dataset::Text) {
    LOOM_CHECK(!d.path.empty()) << "config " << path
                                << ": data.dataset \"text\" needs data.path (a UTF-8 text file)";
  } else if (d.dataset == Dataset::Kjv) {
    LOOM_CHECK(d.path.empty()) << "config " << path << ": data.path '" << d.path
                               << "' is not used by data.dataset \"kjv\" (use dataset = \"text\" "
                                  "to train on a file)";
  }
  LOOM_CHECK(d.val_fraction > 0 && d.val_fraction < 1)
      << "config " << path << ": data.val_fraction must be in (0, 1), got " << d.val_fraction;
  LOOM_CHECK(!d.tokenizer.empty())
      << "config " << path << ": data.tokenizer must be \"bytes\" or the path of a tokenizer";
  if (d.tokenizer == "bpe") {
    LOOM_CHECK(d.dataset != Dataset::Tokens)
        << "config " << path << ": data.tokenizer \"bpe\" is learned from the text, and "
        << "data.dataset \"tokens\" is text tokenized already (by the tokenizer it names)";
    LOOM_CHECK(g.vocab_size > 256)
        << "config " << path << ": data.tokenizer \"bpe\" learns merges beyond the 256 byte "
        << "tokens; model.vocab_size " << g.vocab_size << " leaves none";
  }
  if (d.tokenizer == "bytes") {
    LOOM_CHECK(g.vocab_size == 256)
        << "config " << path << ": data.tokenizer \"bytes\" has 256 tokens but model.vocab_size is "
        << g.vocab_size;
  }

  c.eval.every = f.get_int("eval", "every", c.eval.every, kAnyStep);
  c.eval.windows = f.get_int("eval", "windows", c.eval.windows, 1000000);
  LOOM_CHECK(c.eval.every >= 0 && c.eval.windows > 0)
      << "config " << path << ": eval.every must be non-negative and eval.windows positive";

  auto& s = c.lm_sample;
  s.prompt = f.get_string("sample", "prompt", s.prompt);
  s.tokens = f.get_int("sample", "tokens", s.tokens, 1000000);
  s.temperature = f.get_double("sample", "temperature", s.temperature);
  LOOM_CHECK(s.tokens >= 0 && s.temperature >= 0)
      << "config " << path << ": sample.tokens and sample.temperature must be non-negative";
}

ParallelFacts gpt_facts(const Config& c) {
  const models::GptConfig& g = c.gpt();
  return {.pipeline = true,
          .tensor_and_context = true,
          .no_context = g.has_ssm() ? "has Mamba-2 blocks (model.mixers \"" + g.mixers +
                                          "\"), whose state is not passed between context-"
                                          "parallel ranks yet: their scan needs the whole "
                                          "sequence on one rank"
                                    : "",
          .depth = g.depth,
          .heads = g.heads,
          .kv_heads = g.num_kv_heads(),
          .mlp_hidden = g.mlp_hidden(),
          .ssm_heads = g.has_ssm() ? g.ssm_config().heads() : 0,
          .ssm_groups = g.has_ssm() ? g.ssm.groups : 0,
          .tokens = g.context,
          .tokens_what = std::to_string(g.context) + " tokens (model.context)",
          .vocab = g.vocab_size,
          .moe = &g.moe};
}

plan::StepShape gpt_config_step(const Config& c, int64_t samples, int64_t tokens) {
  return gpt_step_shape(c.run.name, c.gpt(), samples, tokens > 0 ? tokens : c.gpt().context);
}

BenchStep gpt_bench_step(const Config& config, const plan::StepShape& shape, Device device) {
  auto gpt = std::make_shared<models::Gpt>(config.gpt());
  const int64_t T = shape.items_per_sample;
  Tensor ids = synthetic_ids({shape.batch, T + 1}, config.gpt().vocab_size, shape.name);
  Tensor inputs = detail::raw_to_device(contiguous(narrow(ids, 1, 0, T)), device);
  Tensor targets = detail::raw_to_device(contiguous(narrow(ids, 1, 1, T)), device);
  return {gpt, [gpt, inputs, targets] { return gpt->loss(inputs, targets); }};
}

void sample_gpt_command(const SampleCall& call) {
  const std::string text = sample_gpt(call.checkpoint, call.gpt);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
}

void eval_gpt_command(const EvalCall& call) {
  const LmEvalResult r = eval_gpt(call.checkpoint, call.windows);
  std::printf(
      "held-out loss of %s: %.4f nats/token, %.4f nats/byte, %.4f bits/byte "
      "(%lld windows, %lld tokens, %lld bytes) -> %s\n",
      call.checkpoint.c_str(), r.nats_per_token(), r.nats_per_byte(), r.bits_per_byte(),
      (long long)r.windows, (long long)r.tokens, (long long)r.bytes, call.out.c_str());
  write_json_file(call.out, Json::object({{"checkpoint", call.checkpoint},
                                          {"windows", r.windows},
                                          {"tokens", r.tokens},
                                          {"bytes", r.bytes},
                                          {"nats_per_token", r.nats_per_token()},
                                          {"nats_per_byte", r.nats_per_byte()},
                                          {"bits_per_byte", r.bits_per_byte()}}));
}

}  // namespace

plan::StepShape gpt_step_shape(std::string name, const models::GptConfig& c, int64_t batch,
                               int64_t seq) {
  plan::StepShape s;
  s.name = std::move(name);
  s.unit = "tok";
  s.batch = batch;
  s.items_per_sample = seq;
  // FLOPs per sequence: the head (2 C V per token) and each block, causal attention counting
  // the t + 1 keys query t sees (at most the sliding window's W); SwiGLU has three matrices; a
  // mixture the router and the k chosen (plus the shared) experts.
  const double C = double(c.width), T = double(seq);
  const double qkv_out = double(c.heads + 2 * c.num_kv_heads()) * double(c.head_dim());
  const double swiglu = c.is_llama() ? 1.5 : 1.0;
  const double W = c.window > 0 ? std::min(double(c.window), T) : T;
  const double keys = (W * (W + 1.0) / 2.0 + (T - W) * W) / T;
  double per_token = 2.0 * C * double(c.vocab_size);
  const nn::MoeConfig moe = c.moe_config();
  // A Mamba-2 block's mixer: its projections and convolution, and the scan per head: within a
  // chunk of L steps C B^T and its product with x (2 L (N + P) a step), the chunk's state and
  // its reading (4 P N).
  const nn::Mamba2Config m = c.ssm_config();
  const double inner = double(m.inner()), ssm_in = inner + double(m.conv_channels() + m.heads());
  const double L = double(std::min<int64_t>(m.chunk, seq)), N = double(m.state),
               P = double(m.head_dim);
  const double ssm_mixer = 2.0 * C * ssm_in + 2.0 * double(m.conv * m.conv_channels()) +
                           double(m.heads()) * (2.0 * L * (N + P) + 4.0 * P * N) + 2.0 * inner * C;
  // Latent attention: its projections (queries straight or through their latent; the latent
  // and shared RoPE key; each head's k_nope and v from the latent; the output), and per key
  // each head's score over nope + rope values and its sum over v values.
  const nn::MlaConfig a = c.mla_config();
  const double heads = double(c.heads), qk = double(a.nope_dim + a.rope_dim);
  const double mla_parameters =
      (a.q_rank > 0 ? double(a.q_rank) * (C + heads * qk) : C * heads * qk) +
      C * double(a.kv_rank + a.rope_dim) +
      double(a.kv_rank) * heads * double(a.nope_dim + a.v_dim) + heads * double(a.v_dim) * C;
  const double mla_mixer = 2.0 * mla_parameters + 2.0 * keys * heads * (qk + double(a.v_dim));
  double mixer_parameters = 0;
  for (int64_t i = 0; i < c.depth; ++i) {
    const double mlp = c.is_moe_block(i)
                           ? double((moe.top_k + moe.shared_experts) * moe.hidden) * swiglu
                           : double(c.mlp_hidden()) * swiglu;
    per_token += (c.is_ssm_block(i) ? 4.0 * C * mlp + ssm_mixer
                  : c.is_mla()      ? 4.0 * C * mlp + mla_mixer
                                    : plan::block_flops_per_token(C, mlp, qkv_out, keys)) +
                 (c.is_moe_block(i) ? 2.0 * C * double(moe.experts) : 0.0);
    mixer_parameters += c.is_ssm_block(i) ? (ssm_in + inner) * C
                        : c.is_mla()      ? mla_parameters
                                          : 4 * C * C;
  }
  s.forward_flops = per_token * T;
  // About 8 w^2 parameters per block's MLP (SwiGLU about as much), its mixer's (attention about
  // 4 w^2) and the embedding; each sample's ids and targets, and its logits (split with the
  // vocabulary).
  s.parameters = 8 * double(c.depth) * C * C + mixer_parameters + double(c.vocab_size) * C +
                 mixture_extra_parameters(c);
  s.sample_bytes = double(c.context) * 8;
  s.split_sample_bytes = double(c.context) * 4 * double(c.vocab_size);
  // What a block keeps for backward per token (plan::BlockValues), counted from its ops:
  // LayerNorm keeps its input and two statistics per row, RMSNorm one; a Linear keeps its
  // input; the fused attention keeps q, k, v, its output and one log-sum-exp per head; RoPE
  // makes rotated copies of q and k; the MLP keeps fc1's output and GELU's, SwiGLU both gates'
  // outputs and their product. A mixture's hidden values: each token's k experts and the
  // shared ones (approximately). The head's peak: the final norm's input and output and its
  // gradient, the logits and their gradient.
  const double H = double(c.heads), Dh = double(c.head_dim()), KV = double(c.num_kv_heads());
  const double F = c.moe.enabled() ? double((moe.top_k + moe.shared_experts) * moe.hidden)
                                   : double(c.mlp_hidden());
  plan::BlockValues& b = s.values;
  b.width = C;
  b.qkv = (H + 2 * KV) * Dh;
  if (c.is_llama()) {
    b.whole = 4 * C + 2;
    b.split = b.qkv + (H + KV) * Dh + C + H + 3 * F;
    b.matmul_split = b.qkv + C + H + 2 * F;
  } else {
    b.whole = 4 * C + 4;
    b.split = b.qkv + C + H + 2 * F;
    b.matmul_split = b.qkv + C + H + F;
  }
  b.mlp_backward = 2 * F;
  b.tokens = T;
  b.head = 3 * C + 2;
  b.head_vocabulary = 2 * double(c.vocab_size);
  return s;
}

extern const ModelSpec kGptSpec = {
    .kind = ModelKind::Gpt,
    .name = "gpt",
    .read = read_gpt,
    .parallel_facts = gpt_facts,
    .diloco = true,
    .make_recipe = make_gpt_recipe,
    .bare_model = [](const Config& c) -> std::unique_ptr<nn::Module> {
      return std::make_unique<models::Gpt>(c.gpt());
    },
    .plan_of =
        [](const nn::Module& m) { return static_cast<const models::Gpt&>(m).parallel_plan(); },
    .piece_states = {},
    .step_shape = gpt_config_step,
    .bench_step = gpt_bench_step,
    .sample = sample_gpt_command,
    .eval = eval_gpt_command,
    .command_flags = {kGptFlags, kPromptFlags},
    .export_hf = export_hf,
};

}  // namespace loom::train
