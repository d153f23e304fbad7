// The MMDiT's spec (train/model_spec.h): a text-to-image diffusion transformer trained by flow
// matching on captioned canvases ([model], [data] and the diffusion models' keys), its step's
// cost, and `loom sample --prompt` / `loom eval` by the canvas judge.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/data/canvas.h"
#include "loom/data/captions.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/config.h"
#include "loom/train/config_read.h"
#include "loom/train/recipes/caption_text.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/gpt.h"
#include "loom/train/recipes/latents.h"
#include "loom/train/recipes/mmdit.h"
#include "loom/train/recipes/specs.h"

namespace loom::train {

void read_canvas_keys(ConfigFile& f, Config& c, const char* kind) {
  const std::string& path = f.path();
  c.data.dataset = dataset_from_name(f.get_string("data", "dataset", "canvas"), {Dataset::Canvas},
                                     "config " + path + ": data.dataset", kind);
  c.data.path = f.get_string("data", "path", c.data.path);
  c.data.canvases = f.get_int("data", "canvases", c.data.canvases);
  c.data.canvas_seed = f.get_int("data", "canvas_seed", c.data.canvas_seed);
  LOOM_CHECK(c.data.canvases > 0 && c.data.canvas_seed >= 0)
      << "config " << path << ": data.canvases must be positive and data.canvas_seed "
      << "non-negative";
}

namespace {

// What an MMDiT's weights are shaped by, for errors that compare two.
std::string mmdit_shape(const models::MmditConfig& m) {
  std::ostringstream s;
  s << (m.cross_attention ? "cross" : "joint") << ", image " << m.channels << " x " << m.image_size
    << " in patches of " << m.patch << ", width " << m.width << ", depth " << m.depth << ", heads "
    << m.heads << ", mlp_ratio " << m.mlp_ratio << ", captions of " << m.text_length << " tokens ("
    << m.vocab << " ids";
  if (m.text_features > 0) s << ", features " << m.text_features << " wide";
  s << ") through " << m.text_depth << " blocks";
  return s.str();
}

// A run directory's latest checkpoint (the one its `latest` names), or `dir` itself (a
// checkpoint): what a run records, so that later reads take the same weights.
std::string checkpoint_in(const std::string& dir, const std::string& what) {
  LOOM_CHECK(std::filesystem::is_directory(dir))
      << what << ": " << dir << " is not a directory (name a run directory or one of its "
      << "checkpoints)";
  std::ifstream latest(dir + "/latest");
  std::string step;
  return latest >> step ? dir + "/" + step : dir;
}

// How captions become the text encoder's input: data.tokenizer, or model.text_encoder (a frozen
// GPT, whose tokenizer reads them).
void read_caption_keys(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  models::MmditConfig& m = std::get<models::MmditConfig>(c.model);
  c.data.text_encoder = f.get_string("model", "text_encoder", "");
  if (!c.data.text_encoder.empty()) {
    const std::string what = "config " + path + ": model.text_encoder";
    LOOM_CHECK(!f.has("data", "tokenizer") && !f.has("model", "vocab_size"))
        << what << ": the GPT's tokenizer reads the captions; leave out data.tokenizer and "
        << "model.vocab_size";
    c.data.tokenizer = "gpt";
    c.data.text_encoder = checkpoint_in(c.data.text_encoder, what);
    f.record("model", "text_encoder", c.data.text_encoder);
    const Config gpt = run_config_of(c.data.text_encoder, ModelKind::Gpt, what.c_str());
    LOOM_CHECK(m.text_length <= gpt.gpt().context)
        << what << ": model.text_length " << m.text_length << " is longer than the GPT's context "
        << gpt.gpt().context;
    m.text_features = gpt.gpt().width;
    m.vocab = CaptionTokenizer::kFirstToken + gpt.gpt().vocab_size;
    return;
  }
  c.data.tokenizer = f.get_string("data", "tokenizer", "words");
  LOOM_CHECK(c.data.tokenizer == "words" || c.data.tokenizer == "bpe")
      << "config " << path << ": data.tokenizer \"" << c.data.tokenizer << "\" is not known "
      << "(words: the captions' closed vocabulary; bpe: a byte-level BPE learned from the "
      << "training captions; or name a GPT trained on captions in model.text_encoder)";
  if (c.data.tokenizer == "words") {
    m.vocab = CaptionVocab().size();
    LOOM_CHECK(m.text_length >= CaptionVocab::longest_canvas_caption())
        << "config " << path << ": model.text_length " << m.text_length
        << " is shorter than the longest canvas caption (" << CaptionVocab::longest_canvas_caption()
        << " tokens)";
    return;
  }
  const int64_t tokens = f.get_int("model", "vocab_size", 512, 1000000);
  LOOM_CHECK(tokens > BpeTokenizer::kByteTokens)
      << "config " << path << ": model.vocab_size " << tokens << " leaves no merge beyond the "
      << BpeTokenizer::kByteTokens << " byte tokens";
  m.vocab = CaptionTokenizer::kFirstToken + tokens;
}

// [dpo]: post-training a trained MMDiT of this config's shape and space.
void read_dpo_keys(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  DpoConfig& d = c.dpo;
  d.reference = f.get_string("dpo", "reference", "");
  d.pairs = f.get_int("dpo", "pairs", d.pairs, 1000000);
  d.beta = f.get_double("dpo", "beta", d.beta);
  if (d.reference.empty()) return;
  LOOM_CHECK(d.pairs > 0 && d.beta > 0) << "config " << path << ": dpo.pairs (" << d.pairs
                                        << ") and dpo.beta (" << d.beta << ") must be positive";
  const std::string what = "config " + path + ": dpo.reference";
  d.reference = checkpoint_in(d.reference, what);
  f.record("dpo", "reference", d.reference);
  const Config ref = run_config_of(d.reference, ModelKind::Mmdit, what.c_str());
  LOOM_CHECK(mmdit_shape(ref.mmdit()) == mmdit_shape(c.mmdit()))
      << what << ": the reference's model is " << mmdit_shape(ref.mmdit()) << "; this config's is "
      << mmdit_shape(c.mmdit()) << " (the run starts from the reference's weights)";
  LOOM_CHECK(ref.data.latent == c.data.latent)
      << what << ": the reference trained on "
      << (ref.data.latent.empty() ? "pixels" : "the latents of " + ref.data.latent)
      << ", this config on "
      << (c.data.latent.empty() ? "pixels" : "the latents of " + c.data.latent);
  LOOM_CHECK(ref.data.tokenizer == c.data.tokenizer && ref.data.text_encoder == c.data.text_encoder)
      << what << ": the reference read its captions through "
      << (ref.data.text_encoder.empty() ? ref.data.tokenizer : ref.data.text_encoder)
      << ", this config through "
      << (c.data.text_encoder.empty() ? c.data.tokenizer : c.data.text_encoder);
  LOOM_CHECK(!c.eval.classifier.empty())
      << "config " << path << ": dpo needs eval.classifier: the canvas judge ranks the pairs";
}

void read_mmdit(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  auto& m = c.model.emplace<models::MmditConfig>();
  m.image_size = f.get_int("model", "image_size", m.image_size);
  m.channels = f.get_int("model", "channels", m.channels);
  m.patch = f.get_int("model", "patch", m.patch);
  m.width = f.get_int("model", "width", m.width);
  m.depth = f.get_int("model", "depth", m.depth);
  m.heads = f.get_int("model", "heads", m.heads);
  m.mlp_ratio = f.get_double("model", "mlp_ratio", m.mlp_ratio);
  m.text_length = f.get_int("model", "text_length", m.text_length);
  m.text_depth = f.get_int("model", "text_depth", m.text_depth);
  const std::string conditioning = f.get_string("model", "conditioning", "joint");
  LOOM_CHECK(conditioning == "joint" || conditioning == "cross")
      << "config " << path << ": model.conditioning \"" << conditioning
      << "\" is not known (joint: MMDiT's joint attention, cross: PixArt's cross-attention)";
  m.cross_attention = conditioning == "cross";
  c.data.latent = f.get_string("model", "latent", "");
  read_caption_keys(f, c);
  m.validate();

  read_canvas_keys(f, c, "mmdit");
  const std::string told = f.get_string("data", "captions", "full");
  LOOM_CHECK(told == "full" || told == "classes")
      << "config " << path << ": data.captions \"" << told
      << "\" is not known (full: the captions; classes: the items' classes alone)";
  c.data.class_captions = told == "classes";
  // Latent diffusion: the model's image is the autoencoder's latent.
  if (!c.data.latent.empty()) {
    const models::AutoencoderConfig a =
        autoencoder_config_of(c.data.latent, "config " + path + ": model.latent");
    check_autoencoder_data(c.data.latent, Dataset::Canvas, "config " + path + ": model.latent");
    LOOM_CHECK(m.channels == a.latent_channels && m.image_size == a.latent_size())
        << "config " << path << ": model.latent: the autoencoder's latents are "
        << a.latent_channels << " x " << a.latent_size() << " x " << a.latent_size()
        << "; model.channels " << m.channels << " and model.image_size " << m.image_size
        << " do not match them";
  } else {
    LOOM_CHECK(m.image_size == kCanvasSize && m.channels == 1)
        << "config " << path << ": the canvases are 1 x " << kCanvasSize << " x " << kCanvasSize
        << ", model.channels " << m.channels << " and model.image_size " << m.image_size
        << " do not match them (or name an autoencoder in model.latent)";
  }
  read_diffusion_keys(f, c, CaptionVocab::kNull);
  read_dpo_keys(f, c);
}

ParallelFacts mmdit_facts(const Config& c) {
  const models::MmditConfig& m = c.mmdit();
  return {.pipeline = true,
          .tensor_and_context = true,
          .depth = m.depth,
          .heads = m.heads,
          .kv_heads = m.heads,
          .mlp_hidden = m.mlp_hidden(),
          .tokens = m.tokens(),
          .tokens_what = std::to_string(m.tokens()) + " caption and image tokens",
          .segments = {m.text_length, m.image_tokens()}};
}

plan::StepShape mmdit_step_shape(const Config& config, int64_t samples, int64_t /*tokens*/) {
  const models::MmditConfig& c = config.mmdit();
  plan::StepShape s;
  s.name = config.run.name;
  s.unit = "img";
  s.batch = samples;
  // FLOPs per canvas. Joint: every token of the joint sequence through its stream's weights,
  // attending to all L + T; cross: the image tokens through self-attention over T and the MLP,
  // their queries and output projection, the caption's keys and values, attention to its L.
  // Both: the adaLN projections, the caption encoder over L, embeddings and output.
  const double D = double(c.width), L = double(c.text_length), T = double(c.image_tokens()),
               S = L + T, F = c.mlp_ratio * D, pp = double(c.patch * c.patch * c.channels);
  const double block =
      c.cross_attention ? plan::block_flops_per_token(D, F, 3 * D, T) * T +
                              2.0 * 2 * D * D * (T + L) + 2.0 * 2 * T * L * D + 2.0 * D * 6 * D
                        : plan::block_flops_per_token(D, F, 3 * D, S) * S + 2 * 2.0 * D * 6.0 * D;
  s.forward_flops = double(c.depth) * block +
                    double(c.text_depth) * plan::block_flops_per_token(D, F, 3 * D, L) * L +
                    2.0 * pp * D * 2.0 * T + 2.0 * (256.0 * D + 2 * D * D);
  // Joint: two streams per block (attention 4 w^2, MLP 8, adaLN 6 each); cross: one stream and
  // the cross-attention's 4 w^2; the text encoder's 12 w^2 a block.
  s.parameters =
      ((c.cross_attention ? 22 : 36) * double(c.depth) + 12 * double(c.text_depth)) * D * D;
  s.sample_bytes = double(c.channels * c.image_size * c.image_size) * 4 + L * 8;
  plan::BlockValues& b = s.values;  // as the DiT's block, over the joint sequence
  const double H = double(c.heads);
  b.width = D;
  b.qkv = 3 * D;
  b.whole = 6 * D + 4;
  b.split = b.qkv + D + H + 2 * F;
  b.matmul_split = b.qkv + D + H + F;
  b.mlp_backward = 2 * F;
  b.tokens = S;
  b.head = 3 * D + 2 + 2 * pp;
  return s;
}

BenchStep mmdit_bench_step(const Config& config, const plan::StepShape& shape, Device device) {
  const models::MmditConfig& c = config.mmdit();
  auto model = std::make_shared<models::Mmdit>(c);
  if (!config.data.text_encoder.empty()) {  // the frozen GPT's features, as the run reads them
    CaptionText text;
    text.gpt = load_gpt_checkpoint(config.data.text_encoder, "bench").model;
    text.attach(*model);
  }
  Tensor x0 = randn({shape.batch, c.channels, c.image_size, c.image_size},
                    RngKey{1, "bench.data", "x0"}, DType::F32, device);
  Tensor captions = detail::raw_to_device(
      synthetic_ids({shape.batch, c.text_length}, c.vocab, shape.name), device);
  diffusion::FlowMatchingConfig flow;
  flow.null_class = CaptionVocab::kNull;
  return {model, [model, x0, captions, flow] {
            return diffusion::flow_matching_loss(
                [&](const Tensor& x, const Tensor& t, const Tensor& y) {
                  return model->forward(x, t, y);
                },
                x0, captions, flow, 1, 0);
          }};
}

}  // namespace

extern const ModelSpec kMmditSpec = {
    .kind = ModelKind::Mmdit,
    .name = "mmdit",
    .read = read_mmdit,
    .parallel_facts = mmdit_facts,
    .diloco = true,
    .make_recipe = make_mmdit_recipe,
    .bare_model = [](const Config& c) -> std::unique_ptr<nn::Module> {
      return std::make_unique<models::Mmdit>(c.mmdit());
    },
    .plan_of =
        [](const nn::Module& m) { return static_cast<const models::Mmdit&>(m).parallel_plan(); },
    .piece_states = {"ema"},
    .step_shape = mmdit_step_shape,
    .bench_step = mmdit_bench_step,
    .sample = sample_mmdit_command,
    .eval = eval_mmdit_command,
    .command_flags = {kDitFlags, kPromptFlags},
};

}  // namespace loom::train
