#include "loom/train/config.h"

#include "loom/train/config_file.h"

namespace loom::train {

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  ConfigFile f(path, overrides);
  Config c;
  c.run.name = f.get_string("run", "name", c.run.name);
  c.run.out_dir = f.get_string("run", "out_dir", c.run.out_dir);
  c.run.seed = uint64_t(f.get_int("run", "seed", int64_t(c.run.seed)));

  c.model_kind = f.get_string("model", "kind", c.model_kind);
  LOOM_CHECK(c.model_kind == "dit") << "config " << path << ": model.kind '" << c.model_kind
                                    << "' is not known (expected dit)";
  auto& d = c.dit;
  d.image_size = f.get_int("model", "image_size", d.image_size);
  d.channels = f.get_int("model", "channels", d.channels);
  d.patch = f.get_int("model", "patch", d.patch);
  d.width = f.get_int("model", "width", d.width);
  d.depth = f.get_int("model", "depth", d.depth);
  d.heads = f.get_int("model", "heads", d.heads);
  d.mlp_ratio = f.get_double("model", "mlp_ratio", d.mlp_ratio);
  d.num_classes = f.get_int("model", "num_classes", d.num_classes);
  d.validate();

  c.data.dataset = f.get_string("data", "dataset", c.data.dataset);
  c.data.path = f.get_string("data", "path", c.data.path);
  LOOM_CHECK(c.data.dataset == "fashion_mnist")
      << "config " << path << ": data.dataset '" << c.data.dataset << "' is not known";

  auto& t = c.train;
  t.steps = f.get_int("train", "steps", t.steps);
  t.batch_size = f.get_int("train", "batch_size", t.batch_size);
  t.grad_accum = f.get_int("train", "grad_accum", t.grad_accum);
  t.log_every = f.get_int("train", "log_every", t.log_every);
  t.ckpt_every = f.get_int("train", "ckpt_every", t.ckpt_every);
  t.keep_checkpoints = f.get_int("train", "keep_checkpoints", t.keep_checkpoints);
  t.max_minutes = f.get_double("train", "max_minutes", t.max_minutes);
  t.stop_after = f.get_int("train", "stop_after", t.stop_after);
  t.grad_clip = f.get_double("train", "grad_clip", t.grad_clip);
  t.ema_decay = f.get_double("train", "ema_decay", t.ema_decay);
  t.ema_start = f.get_int("train", "ema_start", t.ema_start);
  LOOM_CHECK(t.steps > 0 && t.batch_size > 0 && t.grad_accum > 0 && t.log_every > 0 &&
             t.ckpt_every >= 0 && t.keep_checkpoints > 0 && t.max_minutes >= 0 && t.stop_after >= 0)
      << "config " << path << ": train.steps, batch_size, grad_accum, log_every and "
      << "keep_checkpoints must be positive; ckpt_every, max_minutes and stop_after non-negative";
  LOOM_CHECK(t.ema_decay >= 0 && t.ema_decay < 1)
      << "config " << path << ": train.ema_decay must be in [0, 1), got " << t.ema_decay;

  auto& o = c.adamw;
  o.lr = f.get_double("optim", "lr", 1e-3);
  o.beta1 = f.get_double("optim", "beta1", o.beta1);
  o.beta2 = f.get_double("optim", "beta2", o.beta2);
  o.eps = f.get_double("optim", "eps", o.eps);
  o.weight_decay = f.get_double("optim", "weight_decay", o.weight_decay);
  auto& s = c.schedule;
  s.lr = o.lr;
  s.kind = f.get_string("optim", "schedule", s.kind);
  s.warmup_steps = f.get_int("optim", "warmup_steps", s.warmup_steps);
  s.min_lr_ratio = f.get_double("optim", "min_lr_ratio", s.min_lr_ratio);
  s.decay_fraction = f.get_double("optim", "decay_fraction", s.decay_fraction);
  s.total_steps = t.steps;
  s.validate();

  c.flow.label_dropout = f.get_double("diffusion", "label_dropout", c.flow.label_dropout);
  c.flow.logit_normal_mean = f.get_double("diffusion", "logit_normal_mean", c.flow.logit_normal_mean);
  c.flow.logit_normal_std = f.get_double("diffusion", "logit_normal_std", c.flow.logit_normal_std);
  c.flow.null_class = d.num_classes;
  LOOM_CHECK(c.flow.label_dropout >= 0 && c.flow.label_dropout <= 1 && c.flow.logit_normal_std > 0)
      << "config " << path << ": diffusion.label_dropout must be in [0, 1] and "
      << "logit_normal_std positive";

  c.sample.steps = f.get_int("sample", "steps", c.sample.steps);
  c.sample.cfg_scale = f.get_double("sample", "cfg_scale", c.sample.cfg_scale);
  c.sample.heun = f.get_bool("sample", "heun", c.sample.heun);
  c.sample.per_class = f.get_int("sample", "per_class", c.sample.per_class);
  LOOM_CHECK(c.sample.steps > 0 && c.sample.per_class > 0)
      << "config " << path << ": sample.steps and sample.per_class must be positive";

  c.eval.classifier = f.get_string("eval", "classifier", c.eval.classifier);
  c.eval.num_samples = f.get_int("eval", "num_samples", c.eval.num_samples);

  f.check_all_keys_used();
  c.resolved_toml = f.resolved();
  return c;
}

}  // namespace loom::train
