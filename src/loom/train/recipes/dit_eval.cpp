// Quality of a DiT: class accuracy of its samples and FID on the classifier's features.
#include <cstdio>

#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/idx.h"
#include "loom/data/sampler.h"
#include "loom/diffusion/fid.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/moe_balance.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/dit.h"
#include "loom/train/recipes/latents.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

DitQuality evaluate_dit(const diffusion::VelocityFn& velocity, const models::DitConfig& config,
                        const std::string& classifier_dir, const std::string& data_path,
                        int64_t num_samples, const DitSampleOptions& options) {
  auto classifier = load_classifier(classifier_dir);
  const int64_t classes = config.num_classes;
  LOOM_CHECK(num_samples >= classes)
      << "eval: need at least " << classes << " samples, got " << num_samples;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < num_samples; ++i) y.push_back(i % classes);  // class-balanced
  Tensor labels = from_vector(y, {num_samples});
  std::printf("eval: sampling %lld images for class accuracy and FID\n", (long long)num_samples);
  std::fflush(stdout);
  Tensor samples = sample_dit_images(velocity, config, labels, options);
  std::printf("eval: classifier features of the samples, the test set and %lld real images\n",
              (long long)num_samples);
  std::fflush(stdout);

  ImageDataset test = fashion_mnist(data_path, false), train = fashion_mnist(data_path, true);
  DitQuality q;
  q.samples = num_samples;
  q.class_accuracy = classifier_accuracy(*classifier, samples, labels);
  const diffusion::FeatureStats reference =
      diffusion::feature_stats(classifier_features(*classifier, test.images));
  q.fid = diffusion::frechet_distance(
      diffusion::feature_stats(classifier_features(*classifier, samples)), reference);
  // The floor: as many real (training) images as samples, against the same test statistics.
  Sampler pick(train.images.size(0), num_samples, options.seed + 1);
  const std::vector<int64_t> idx = pick.next_batch();
  Tensor real;
  {
    NoGradGuard no_grad;
    real = index_select(train.images, 0, from_vector(idx, {num_samples}));
  }
  q.fid_floor = diffusion::frechet_distance(
      diffusion::feature_stats(classifier_features(*classifier, real)), reference);
  return q;
}

DitQuality evaluate_dit_checkpoint(const std::string& ckpt_dir, const std::string& classifier_dir,
                                   int64_t num_samples, const DitSampleOptions& options,
                                   const std::string& out_path) {
  const Config cfg = run_config_of(ckpt_dir, ModelKind::Dit, "eval");
  models::Dit model(cfg.dit());
  load_state_dict(model, as_map(CheckpointReader(ckpt_dir).read_all("ema")), ckpt_dir + " (ema)");
  load_selection_biases(model, ckpt_dir);
  const std::unique_ptr<LatentSpace> latent =
      cfg.data.latent.empty() ? nullptr : load_latent_space(cfg.data.latent);
  DitSampleOptions o = options;
  o.latent = latent.get();
  DitQuality q = evaluate_dit([&model](const Tensor& x, const Tensor& t,
                                       const Tensor& y) { return model.forward(x, t, y); },
                              cfg.dit(), classifier_dir, cfg.data.path, num_samples, o);
  Json result = quality_json(q, options);
  result.set("checkpoint", ckpt_dir);
  result.set("classifier", find_classifier(classifier_dir));
  write_json_file(out_path, result);
  return q;
}

Json quality_json(const DitQuality& q, const DitSampleOptions& options) {
  return Json::object({{"samples", q.samples},
                       {"class_accuracy", q.class_accuracy},
                       {"fid", q.fid},
                       {"fid_floor", q.fid_floor},
                       {"fid_over_floor", q.fid / q.fid_floor},
                       {"cfg_scale", options.cfg_scale},
                       {"sample_steps", options.steps},
                       {"sampler", options.heun ? "heun" : "euler"},
                       {"sampler_precision", dtype_name(options.precision)}});
}

DitSampleOptions eval_sample_options(const Config& run, const EvalCall& call) {
  DitSampleOptions o;
  o.steps = call.steps > 0 ? call.steps : run.sample.steps;
  o.cfg_scale = call.cfg_scale >= 0 ? call.cfg_scale : run.sample.cfg_scale;
  o.heun = call.sampler.empty() ? run.sample.heun : call.sampler == "heun";
  o.precision = call.precision.empty() ? run.train.precision : dtype_from_name(call.precision);
  o.seed = run.run.seed;
  o.shift = run.flow.shift;
  return o;
}

void sample_dit_command(const SampleCall& call) {
  sample_dit(call.checkpoint, call.dit);
}

void eval_dit_command(const EvalCall& call) {
  // Sampler settings default to the run's own [sample] section.
  const std::string& ckpt = call.checkpoint;
  const DitSampleOptions o = eval_sample_options(run_config_of(ckpt, ModelKind::Dit, "eval"), call);
  const DitQuality q = evaluate_dit_checkpoint(ckpt, call.classifier, call.samples, o, call.out);
  std::printf(
      "%s: class accuracy %.2f%% of %lld samples, FID %.3f, real-data floor %.3f "
      "(ratio %.2f), cfg %.2f, %lld %s steps -> %s\n",
      ckpt.c_str(), 100.0 * q.class_accuracy, (long long)q.samples, q.fid, q.fid_floor,
      q.fid / q.fid_floor, o.cfg_scale, (long long)o.steps, o.heun ? "Heun" : "Euler",
      call.out.c_str());
}

}  // namespace loom::train
