// The specs of the two ViT kinds (train/model_spec.h): vit_classifier, the Fashion-MNIST
// classifier that judges DiT samples, and dit_router, the decentralized experts' router (a ViT
// told the noise level, which predicts an image's cluster).
#include <cstdio>

#include "loom/checkpoint/run_checkpoints.h"
#include "loom/core/json_file.h"
#include "loom/models/vit/vit.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/config.h"
#include "loom/train/config_read.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/dit_experts.h"
#include "loom/train/recipes/specs.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

namespace {

// The Fashion-MNIST classifier that judges DiT samples (train/recipes/vit_classifier.h).
void read_vit(ConfigFile& f, Config& c, bool router) {
  auto& v = c.model.emplace<models::VitConfig>();
  v.time_conditioning = router;
  v.image_size = f.get_int("model", "image_size", v.image_size);
  v.channels = f.get_int("model", "channels", v.channels);
  v.patch = f.get_int("model", "patch", v.patch);
  v.width = f.get_int("model", "width", v.width);
  v.depth = f.get_int("model", "depth", v.depth);
  v.heads = f.get_int("model", "heads", v.heads);
  v.mlp_ratio = f.get_double("model", "mlp_ratio", v.mlp_ratio);
  v.num_classes = f.get_int("model", "num_classes", v.num_classes);
  v.stem_channels = f.get_int("model", "stem_channels", v.stem_channels);
  v.validate();
  c.data.path = f.get_string("data", "path", c.data.path);
  if (!router) {
    c.train.augment = f.get_bool("train", "augment", c.train.augment);
    return;
  }
  // dit_router: which cluster of `loom cluster` a noisy image x_t comes from.
  c.data.clusters = f.get_string("data", "clusters", "");
  LOOM_CHECK(!c.data.clusters.empty())
      << "config " << f.path() << ": model.kind dit_router needs data.clusters (the "
      << "assignments of `loom cluster`)";
  c.flow.logit_normal_mean =
      f.get_double("diffusion", "logit_normal_mean", c.flow.logit_normal_mean);
  c.flow.logit_normal_std = f.get_double("diffusion", "logit_normal_std", c.flow.logit_normal_std);
  c.flow.shift = f.get_double("diffusion", "shift", c.flow.shift);  // as its experts'
  // model.labels > 0: the router is told the class being sampled (dropped to "no label" at
  // diffusion.label_dropout, as the experts drop theirs, for guidance's unconditional half).
  v.label_classes = f.get_int("model", "labels", 0);
  c.flow.label_dropout = v.label_classes > 0 ? f.get_double("diffusion", "label_dropout", 0.1) : 0;
  c.flow.null_class = v.label_classes;
  LOOM_CHECK(c.flow.logit_normal_std > 0 && c.flow.shift > 0 && v.label_classes >= 0 &&
             c.flow.label_dropout >= 0 && c.flow.label_dropout <= 1)
      << "config " << f.path()
      << ": diffusion.logit_normal_std and shift must be positive, model.labels "
      << "non-negative, diffusion.label_dropout in [0, 1]";
}

// Neither has tensor, context or pipeline parallelism: data parallelism only.
ParallelFacts vit_facts(const Config& c) {
  return {.depth = c.vit().depth};
}

// FLOPs per image: the stem's two 3x3 convolutions at full resolution, then patch embedding,
// the blocks (no adaLN) and the head. About 12 w^2 parameters per block. What a block keeps
// for backward per token (plan::BlockValues): LayerNorms their inputs and two statistics per
// row, each Linear its input, the fused attention q, k, v, its output and a log-sum-exp per
// head, the MLP fc1's output and GELU's; one token more for the class token.
plan::StepShape vit_step(const Config& config, int64_t batch, int64_t /*tokens*/) {
  const models::VitConfig& c = config.vit();
  plan::StepShape s;
  s.name = config.run.name;
  s.unit = "img";
  s.batch = batch;
  const double D = double(c.width), S = double(c.image_size), g = S / double(c.patch);
  const double stem_in = c.stem_channels > 0 ? double(c.stem_channels) : double(c.channels);
  const double stem =
      c.stem_channels > 0 ? 2.0 * S * S * 9.0 * (double(c.channels) + stem_in) * stem_in : 0.0;
  const double per_token =
      double(c.depth) * plan::block_flops_per_token(D, c.mlp_ratio * D, 3 * D, g * g) +
      2.0 * double(c.patch * c.patch) * stem_in * D;
  s.forward_flops = stem + per_token * g * g + 2.0 * D * double(c.num_classes);
  s.parameters = 12 * double(c.depth) * D * D;
  s.sample_bytes = double(c.channels * c.image_size * c.image_size) * 4;
  const double F = c.mlp_ratio * D, H = double(c.heads);
  plan::BlockValues& b = s.values;
  b.width = D;
  b.qkv = 3 * D;
  b.whole = 4 * D + 4;
  b.split = b.qkv + D + H + 2 * F;
  b.matmul_split = b.qkv + D + H + F;
  b.mlp_backward = 2 * F;
  const double grid = double(c.image_size / c.patch);
  b.tokens = grid * grid + 1;
  b.head = 3 * D + 2;
  if (c.stem_channels > 0) s.not_counted = "the convolutional stem's";
  return s;
}

std::unique_ptr<nn::Module> bare_vit(const Config& c) {
  return std::make_unique<models::Vit>(c.vit());
}

nn::ParallelPlan plan_of_vit(const nn::Module& m) {
  return vit_plan(static_cast<const models::Vit&>(m));
}

// The experts a router checkpoint's commands mix (each named by its checkpoint or its run
// directory: its latest).
Experts experts_of(const std::string& router, std::vector<std::string> experts) {
  if (experts.empty()) throw FlagError("--experts", router + " holds a router: name its experts");
  for (std::string& e : experts) e = checkpoint_from_user_path(e);
  return load_experts(router, experts);
}

void sample_mixture(const SampleCall& call) {
  const Experts experts = experts_of(call.checkpoint, call.experts);
  write_samples(mixture_velocity(experts, routing_from_name(call.routing)), experts.dit, call.dit);
}

// The experts' mixture, with the first expert's [sample] settings by default.
void eval_mixture(const EvalCall& call) {
  const Experts experts = experts_of(call.checkpoint, call.experts);
  const Config run =
      run_config_of(checkpoint_from_user_path(call.experts[0]), ModelKind::Dit, "eval");
  const DitSampleOptions o = eval_sample_options(run, call);
  const DitQuality q = evaluate_dit(mixture_velocity(experts, routing_from_name(call.routing)),
                                    experts.dit, call.classifier, run.data.path, call.samples, o);
  Json result = quality_json(q, o);
  result.set("checkpoint", call.checkpoint);
  result.set("experts", int64_t(experts.experts.size()));
  result.set("routing", call.routing);
  write_json_file(call.out, result);
  std::printf(
      "%s + %zu experts, %s routing: class accuracy %.2f%% of %lld samples, FID %.3f, "
      "real-data floor %.3f (ratio %.2f), cfg %.2f, %lld %s steps -> %s\n",
      call.checkpoint.c_str(), experts.experts.size(), call.routing.c_str(),
      100.0 * q.class_accuracy, (long long)q.samples, q.fid, q.fid_floor, q.fid / q.fid_floor,
      o.cfg_scale, (long long)o.steps, o.heun ? "Heun" : "Euler", call.out.c_str());
}

}  // namespace

extern const ModelSpec kVitClassifierSpec = {
    .kind = ModelKind::VitClassifier,
    .name = "vit_classifier",
    .read = [](ConfigFile& f, Config& c) { read_vit(f, c, false); },
    .parallel_facts = vit_facts,
    .make_recipe = make_vit_classifier_recipe,
    .bare_model = bare_vit,
    .plan_of = plan_of_vit,
    .step_shape = vit_step,
};

extern const ModelSpec kDitRouterSpec = {
    .kind = ModelKind::DitRouter,
    .name = "dit_router",
    .read = [](ConfigFile& f, Config& c) { read_vit(f, c, true); },
    .parallel_facts = vit_facts,
    .make_recipe = make_dit_router_recipe,
    .bare_model = bare_vit,
    .plan_of = plan_of_vit,
    .step_shape = vit_step,
    .sample = sample_mixture,
    .eval = eval_mixture,
    .command_flags = {kDitFlags, kRouterFlags},
};

}  // namespace loom::train
