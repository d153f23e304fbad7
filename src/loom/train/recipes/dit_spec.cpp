// The DiT's spec (train/model_spec.h): a class-conditional diffusion transformer trained by
// flow matching on images ([model], [data], [diffusion], [sample], [eval] keys below), its
// step's cost, and `loom bench`'s synthetic step.
#include <cmath>

#include "loom/diffusion/flow_matching.h"
#include "loom/models/dit/dit.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/train/config.h"
#include "loom/train/config_read.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/dit.h"
#include "loom/train/recipes/latents.h"
#include "loom/train/recipes/specs.h"

namespace loom::train {

namespace {

void read_dit(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  auto& d = c.model.emplace<models::DitConfig>();
  d.image_size = f.get_int("model", "image_size", d.image_size);
  d.channels = f.get_int("model", "channels", d.channels);
  d.patch = f.get_int("model", "patch", d.patch);
  d.width = f.get_int("model", "width", d.width);
  d.depth = f.get_int("model", "depth", d.depth);
  d.heads = f.get_int("model", "heads", d.heads);
  d.mlp_ratio = f.get_double("model", "mlp_ratio", d.mlp_ratio);
  d.num_classes = f.get_int("model", "num_classes", d.num_classes);
  read_moe(f, d.moe);
  d.validate();

  c.data.dataset = dataset_from_name(f.get_string("data", "dataset", "fashion_mnist"),
                                     {Dataset::FashionMnist, Dataset::Images},
                                     "config " + path + ": data.dataset", "dit");
  c.data.path = f.get_string("data", "path", c.data.path);
  if (c.data.dataset == Dataset::Images) {  // PNG files: a folder with labels.txt, or .tar shards
    c.data.val_path = f.get_string("data", "val_path", "");
    LOOM_CHECK(f.has("data", "path"))
        << "config " << path << ": data.dataset \"images\" needs data.path (a folder with "
        << "labels.txt, a .tar shard or a directory of shards)";
  }
  c.data.clusters = f.get_string("data", "clusters", "");
  if (!c.data.clusters.empty()) {
    c.data.cluster = f.get_int("data", "cluster", -1);
    LOOM_CHECK(c.data.cluster >= 0) << "config " << path << ": data.clusters needs data.cluster "
                                    << "(the cluster this expert trains on, from 0)";
  }

  // Latent diffusion: the model's image is the autoencoder's latent of a Fashion-MNIST image.
  c.data.latent = f.get_string("model", "latent", "");
  if (!c.data.latent.empty()) {
    const std::string what = "config " + path + ": model.latent";
    LOOM_CHECK(c.data.dataset == Dataset::FashionMnist && c.data.clusters.empty())
        << what << ": latent diffusion takes Fashion-MNIST's whole training set (data.dataset "
        << "\"fashion_mnist\", no data.clusters)";
    check_autoencoder_data(c.data.latent, Dataset::FashionMnist, what);
    const models::AutoencoderConfig a = autoencoder_config_of(c.data.latent, what);
    LOOM_CHECK(d.channels == a.latent_channels && d.image_size == a.latent_size())
        << what << ": the autoencoder's latents are " << a.latent_channels << " x "
        << a.latent_size() << " x " << a.latent_size() << "; model.channels " << d.channels
        << " and model.image_size " << d.image_size << " do not match them";
  }
  read_diffusion_keys(f, c, d.num_classes);
  LOOM_CHECK(c.data.dataset == Dataset::FashionMnist || c.eval.classifier.empty())
      << "config " << path << ": eval.classifier judges samples against Fashion-MNIST; set "
      << "eval.classifier = \"\" for data.dataset \"images\"";
}

}  // namespace

// [train] ema_*, [diffusion], [sample] and [eval] of the diffusion models (dit, mmdit).
void read_diffusion_keys(ConfigFile& f, Config& c, int64_t null_class) {
  const std::string& path = f.path();
  auto& t = c.train;
  t.ema_decay = f.get_double("train", "ema_decay", t.ema_decay);
  t.ema_start = f.get_int("train", "ema_start", t.ema_start, kAnyStep);
  LOOM_CHECK(t.ema_decay >= 0 && t.ema_decay < 1)
      << "config " << path << ": train.ema_decay must be in [0, 1), got " << t.ema_decay;

  c.flow.label_dropout = f.get_double("diffusion", "label_dropout", c.flow.label_dropout);
  const std::string times = f.get_string("diffusion", "timesteps", "logit_normal");
  LOOM_CHECK(times == "logit_normal" || times == "uniform")
      << "config " << path << ": diffusion.timesteps \"" << times
      << "\" is not known (logit_normal or uniform)";
  c.flow.uniform_t = times == "uniform";
  c.flow.logit_normal_mean =
      f.get_double("diffusion", "logit_normal_mean", c.flow.logit_normal_mean);
  c.flow.logit_normal_std = f.get_double("diffusion", "logit_normal_std", c.flow.logit_normal_std);
  c.flow.shift = f.get_double("diffusion", "shift", c.flow.shift);
  LOOM_CHECK(c.flow.shift > 0) << "config " << path << ": diffusion.shift must be positive, got "
                               << c.flow.shift;
  c.flow.null_class = null_class;
  LOOM_CHECK(c.flow.label_dropout >= 0 && c.flow.label_dropout <= 1 && c.flow.logit_normal_std > 0)
      << "config " << path << ": diffusion.label_dropout must be in [0, 1] and "
      << "logit_normal_std positive";

  c.sample.steps = f.get_int("sample", "steps", c.sample.steps, 10000);
  c.sample.cfg_scale = f.get_double("sample", "cfg_scale", c.sample.cfg_scale);
  c.sample.heun = f.get_bool("sample", "heun", c.sample.heun);
  c.sample.per_class = f.get_int("sample", "per_class", c.sample.per_class, 10000);
  c.sample.every = f.get_int("sample", "every", c.sample.every, kAnyStep);
  LOOM_CHECK(c.sample.steps > 0 && c.sample.per_class > 0 && c.sample.every >= 0)
      << "config " << path << ": sample.steps and sample.per_class must be positive, "
      << "sample.every non-negative";

  c.eval.classifier = f.get_string("eval", "classifier", c.eval.classifier);
  c.eval.num_samples = f.get_int("eval", "num_samples", c.eval.num_samples, 1000000);
  // The held-out flow-matching loss on the test split: at the end, and every eval.every steps.
  c.eval.every = f.get_int("eval", "every", 0, kAnyStep);
  c.eval.val_images = f.get_int("eval", "val_images", c.eval.val_images);
  LOOM_CHECK(c.eval.every >= 0 && c.eval.val_images >= 0)
      << "config " << path << ": eval.every and eval.val_images must be non-negative";
}

namespace {

ParallelFacts dit_facts(const Config& c) {
  const models::DitConfig& d = c.dit();
  return {.pipeline = true,
          .tensor_and_context = true,
          .depth = d.depth,
          .heads = d.heads,
          .kv_heads = d.heads,
          .mlp_hidden = d.mlp_hidden(),
          .tokens = d.tokens(),
          .tokens_what = std::to_string(d.tokens()) + " tokens per image",
          .moe = &d.moe};
}

plan::StepShape dit_config_step(const Config& c, int64_t samples, int64_t /*tokens*/) {
  return dit_step_shape(c.run.name, c.dit(), samples);
}

BenchStep dit_bench_step(const Config& config, const plan::StepShape& shape, Device device) {
  const models::DitConfig& c = config.dit();
  auto dit = std::make_shared<models::Dit>(c);
  Tensor x0 = randn({shape.batch, c.channels, c.image_size, c.image_size},
                    RngKey{1, "bench.data", "x0"}, DType::F32, device);
  Tensor labels =
      detail::raw_to_device(synthetic_ids({shape.batch}, c.num_classes, shape.name), device);
  diffusion::FlowMatchingConfig flow;
  flow.null_class = c.num_classes;
  return {dit, [dit, x0, labels, flow] {
            return diffusion::flow_matching_loss(
                [&](const Tensor& x, const Tensor& t, const Tensor& y) {
                  return dit->forward(x, t, y);
                },
                x0, labels, flow, 1, 0);
          }};
}

}  // namespace

plan::StepShape dit_step_shape(std::string name, const models::DitConfig& c, int64_t batch) {
  plan::StepShape s;
  s.name = std::move(name);
  s.unit = "img";
  s.batch = batch;
  // FLOPs per image: patch embedding and output projection, the blocks (a mixture: the router
  // and the chosen experts), and the conditioning: the timestep MLP (256 -> D -> D) and the
  // adaLN projections.
  const double D = double(c.width), T = double(c.tokens());
  double per_token = 2.0 * double(c.patch * c.patch * c.channels) * D * 2.0;  // embed + out
  const nn::MoeConfig moe = c.moe_config();
  for (int64_t i = 0; i < c.depth; ++i)
    per_token += c.is_moe_block(i)
                     ? plan::block_flops_per_token(
                           D, double((moe.top_k + moe.shared_experts) * moe.hidden), 3 * D, T) +
                           2.0 * D * double(moe.experts)
                     : plan::block_flops_per_token(D, c.mlp_ratio * D, 3 * D, T);
  const double per_image =
      2.0 * (256.0 * D + D * D) + double(c.depth) * 2.0 * D * 6.0 * D + 2.0 * D * 2.0 * D;
  s.forward_flops = per_token * T + per_image;
  // About 18 w^2 parameters per block: attention 4, MLP 8, adaLN 6; mixtures' experts instead.
  s.parameters = 18 * double(c.depth) * D * D + mixture_extra_parameters(c);
  s.sample_bytes = double(c.channels * c.image_size * c.image_size) * 4;
  // What a block keeps for backward per token (plan::BlockValues): a ViT block's (see the
  // classifier's spec) with adaLN's fused norm-and-modulate keeping its input, statistics and
  // output, and each gated residual its branch's output; the head's peak adds the output
  // projection's values and their gradient.
  const double F = double(c.mlp_hidden()), H = double(c.heads);
  plan::BlockValues& b = s.values;
  b.width = D;
  b.qkv = 3 * D;
  b.whole = 6 * D + 4;
  b.split = b.qkv + D + H + 2 * F;
  b.matmul_split = b.qkv + D + H + F;
  b.mlp_backward = 2 * F;
  b.tokens = T;
  b.head = 3 * D + 2 + 2 * double(c.patch * c.patch * c.channels);
  return s;
}

extern const ModelSpec kDitSpec = {
    .kind = ModelKind::Dit,
    .name = "dit",
    .read = read_dit,
    .parallel_facts = dit_facts,
    .diloco = true,
    .make_recipe = make_dit_recipe,
    .bare_model = [](const Config& c) -> std::unique_ptr<nn::Module> {
      return std::make_unique<models::Dit>(c.dit());
    },
    .plan_of =
        [](const nn::Module& m) { return static_cast<const models::Dit&>(m).parallel_plan(); },
    .piece_states = {"ema"},
    .step_shape = dit_config_step,
    .bench_step = dit_bench_step,
    .sample = sample_dit_command,
    .eval = eval_dit_command,
    .command_flags = {kDitFlags},
};

}  // namespace loom::train
