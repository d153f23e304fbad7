#include "loom/train/dit_trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "loom/checkpoint/json_file.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/atomic_file.h"
#include "loom/core/trace.h"
#include "loom/data/idx.h"
#include "loom/data/npy.h"
#include "loom/data/prefetch.h"
#include "loom/data/sampler.h"
#include "loom/diffusion/png.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/optim/ema.h"
#include "loom/train/bench.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/parallel_run.h"
#include "loom/train/profiler.h"
#include "loom/train/progress.h"
#include "loom/train/step_guard.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

struct Batch {
  Tensor images, labels;
  Sampler::State next;  // sampler position after this batch (what a checkpoint must record)
};

Tensor sample_grid_labels(int64_t classes, int64_t per_class) {
  std::vector<int64_t> y;
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < per_class; ++i) y.push_back(c);
  return from_vector(y, {classes * per_class});
}

// The DiT's pieces as this rank's pipeline stages: the embedders before the first stage, its
// chunks' blocks, the final layer and the loss after the last; micro-batch m is batches[m].
// What travels between stages is the tokens with the conditioning appended as one more token,
// (B, T + 1, D): every stage's blocks need both, and the conditioning's gradient flows back
// through every stage to the embedders.
parallel::PipelineStages dit_stages(const models::Dit& model, const ParallelRun::Pipeline& pipe,
                                    const std::vector<diffusion::FlowMatchingBatch>& batches) {
  const int64_t T = model.config.tokens(), D = model.config.width;
  auto pack = [](const Tensor& h, const Tensor& c) { return cat({h, unsqueeze(c, 1)}, 1); };
  auto tokens = [T](const Tensor& a) { return contiguous(narrow(a, 1, 0, T)); };
  auto conditioning = [T](const Tensor& a) { return contiguous(squeeze(narrow(a, 1, T, 1), 1)); };
  parallel::PipelineStages st;
  for (const auto& [begin, end] : pipe.chunk_blocks)
    st.forward.push_back([=, &model](const Tensor& a) {
      Tensor h = tokens(a);
      const Tensor c = conditioning(a);
      for (int64_t i = begin; i < end; ++i) {
        const auto& block = model.blocks[size_t(i)];
        h = block->call({h, c}, [&block](const auto& in) { return block->forward(in[0], in[1]); });
      }
      return pack(h, c);
    });
  st.input = [=, &model, &batches](int64_t m) {
    const auto& b = batches[size_t(m)];
    const models::Dit::Embedded e = model.embed(b.xt, b.t, b.labels);
    return pack(e.tokens, e.conditioning);
  };
  st.loss = [=, &model, &batches](const Tensor& out, int64_t m) {
    return mse(model.head(tokens(out), conditioning(out)), batches[size_t(m)].target);
  };
  st.activation_shape = {batches.at(0).xt.size(0), T + 1, D};
  return st;
}

diffusion::VelocityFn velocity_of(const models::Dit& model) {
  return [&model](const Tensor& x, const Tensor& t, const Tensor& y) {
    return model.forward(x, t, y);
  };
}

}  // namespace

Tensor sample_dit_images(const models::Dit& model, const Tensor& labels,
                         const DitSampleOptions& o) {
  const auto& c = model.config;
  const int64_t N = labels.size(0), chunk = 100;
  std::vector<Tensor> parts;
  diffusion::SamplerConfig sc{o.steps, o.heun, o.cfg_scale, c.num_classes};
  // Sampling thousands of images takes minutes on a CPU: a line every 10 s says how far.
  const auto start = std::chrono::steady_clock::now();
  auto last_line = start;
  for (int64_t at = 0; at < N; at += chunk) {
    const int64_t n = std::min(chunk, N - at);
    Tensor x = diffusion::sample(velocity_of(model), {n, c.channels, c.image_size, c.image_size},
                                 narrow(labels, 0, at, n), sc, o.seed + uint64_t(at));
    parts.push_back(x);
    const auto now = std::chrono::steady_clock::now();
    if (N > chunk && (now - last_line >= std::chrono::seconds(10) || at + n == N)) {
      last_line = now;
      const double s = std::chrono::duration<double>(now - start).count();
      std::printf("sampling: %lld/%lld images (%lld steps each) | %s elapsed | ETA %s\n",
                  (long long)(at + n), (long long)N, (long long)o.steps,
                  format_duration(s).c_str(),
                  format_duration(s / double(at + n) * double(N - at - n)).c_str());
      std::fflush(stdout);
    }
  }
  NoGradGuard no_grad;
  Tensor all = cat(parts, 0);
  // Clamp to the data range.
  std::vector<float> v = to_vector(all);
  for (float& e : v) e = std::max(-1.0f, std::min(1.0f, e));
  return from_vector(v, all.shape());
}

namespace {

void write_samples(const models::Dit& model, const DitSampleOptions& o) {
  const int64_t classes = model.config.num_classes;
  Tensor labels = sample_grid_labels(classes, o.per_class);
  Tensor images = sample_dit_images(model, labels, o);
  if (!o.png_path.empty()) {
    ImageGrid grid = image_grid(images, int(classes), int(o.per_class));
    write_png(o.png_path, grid.pixels, grid.width, grid.height, grid.channels);
  }
  if (!o.npy_prefix.empty()) {
    write_npy(o.npy_prefix + "_images.npy", images);
    write_npy(o.npy_prefix + "_labels.npy", labels);
  }
  std::printf("samples: %lld images (%lld per class, %lld %s steps, cfg %.2f) -> %s%s%s\n",
              (long long)images.size(0), (long long)o.per_class, (long long)o.steps,
              o.heun ? "Heun" : "Euler", o.cfg_scale, o.png_path.c_str(),
              !o.png_path.empty() && !o.npy_prefix.empty() ? " and " : "",
              o.npy_prefix.empty() ? "" : (o.npy_prefix + "_{images,labels}.npy").c_str());
}

}  // namespace

void train_dit(const Config& cfg, const std::string& resume_from) {
  const auto& tc = cfg.train;
  const std::string run_dir = cfg.run_dir();
  ParallelRun par(cfg);
  ImageDataset data = fashion_mnist(cfg.data.path, /*train=*/true);
  LOOM_CHECK(data.images.size(1) == cfg.dit.channels && data.images.size(2) == cfg.dit.image_size)
      << "dataset images " << data.images.shape() << " do not match model.channels "
      << cfg.dit.channels << " and model.image_size " << cfg.dit.image_size;
  LOOM_CHECK(data.num_classes <= cfg.dit.num_classes)
      << "dataset has " << data.num_classes << " classes, model.num_classes is "
      << cfg.dit.num_classes;

  models::Dit model(cfg.dit);
  model.init_parameters(cfg.run.seed);
  optim::AdamW& opt = par.setup(model, model.block_names(), model.parallel_plan(), cfg.adamw);
  optim::Ema ema(par.piece_parameters(), tc.ema_decay);  // of the master weights this rank holds
  auto ema_state = [&] {
    std::vector<Tensor> values;
    for (const auto& [name, t] : ema.named_weights()) values.push_back(t);
    return std::vector<PieceState>{{"ema", values}};
  };
  Sampler sampler(data.images.size(0), par.local_batch(), cfg.run.seed, /*shuffle=*/true,
                  par.dp_rank(), par.dp_size());

  int64_t start_step = 0;
  if (!resume_from.empty()) {
    const std::string& ckpt = resume_from;
    CheckpointReader reader(ckpt);
    Json state = read_trainer_state(reader);
    LOOM_CHECK(state.at("model_kind").as_string() == "dit")
        << "checkpoint " << ckpt << " is of model kind " << state.at("model_kind").as_string();
    par.load_checkpoint(reader, ema_state());
    start_step = state.at("step").as_int();
    opt.set_steps_taken(state.at("optimizer_steps").as_int());
    sampler.set_state(
        {state.at("sampler_epoch").as_int(), state.at("sampler_position").as_int()});
    std::printf("resumed from %s at step %lld\n", ckpt.c_str(), (long long)start_step);
  }
  // Only a run that starts (or validly resumes) records its config: a failed --resume must
  // not overwrite the config of the run it refused.
  if (par.main()) {
    fs::create_directories(run_dir);
    write_file_atomic(run_dir + "/config.toml", cfg.resolved_toml);
  }
  std::printf("dit: %lld parameters, %lld tokens per image, batch %lld x %lld, %d threads, %s\n",
              (long long)model.num_parameters(), (long long)cfg.dit.tokens(),
              (long long)tc.batch_size, (long long)tc.grad_accum, omp_get_max_threads(),
              par.describe().c_str());

  // Batches are gathered on a background thread so the step never waits for data.
  Prefetcher<Batch> prefetch([&] {
    std::vector<int64_t> idx = sampler.next_batch();
    Tensor index = from_vector(idx, {int64_t(idx.size())});
    NoGradGuard no_grad;
    return Batch{index_select(data.images, 0, index), index_select(data.labels, 0, index),
                 sampler.state()};
  });

  // Collective: every rank writes its pieces.
  auto save = [&](int64_t step, const Sampler::State& pos) {
    Json state = Json::object({{"model_kind", "dit"},
                               {"run_id", cfg.run.id},
                               {"step", step},
                               {"optimizer_steps", opt.steps_taken()},
                               {"sampler_epoch", pos.epoch},
                               {"sampler_position", pos.position},
                               {"seed", int64_t(cfg.run.seed)}});
    return par.save_checkpoint(run_dir, step, state, ema_state(), tc.keep_checkpoints);
  };

  Progress progress(par.metrics_path(run_dir), tc.steps, "img", tc.batch_size * tc.grad_accum,
                    /*append=*/start_step > 0);
  progress.set_time_budget(tc.max_minutes * 60);
  progress.count_data_wait([&] { return prefetch.waited_seconds(); });
  progress.count_flops(  // one step's work against the GEMM ceiling: the line's MFU
      train_step_flops(dit_bench(cfg.run.name, cfg.dit, tc.batch_size * tc.grad_accum)),
      measure_gemm_ceiling(tc.precision == "bf16" ? DType::BF16 : DType::F32, 1024),
      dist::world_size());
  StepGuard guard(cfg, par, run_dir);
  Profiler profiler(parse_profile_steps(cfg.run.profile_steps), run_dir, *dist::world());
  model.name_for_trace();
  diffusion::VelocityFn velocity = velocity_of(model);
  Sampler::State position = sampler.state();
  int64_t step = start_step;
  for (; step < tc.steps; ++step) {
    profiler.begin_step(step);
    guard.begin_step(step);
    AutocastGuard autocast(tc.precision == "bf16" ? DType::BF16 : DType::F32);
    double loss_sum = 0;
    if (const auto* pipe = par.pipeline()) {
      std::vector<diffusion::FlowMatchingBatch> batches;
      for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
        Batch b = prefetch.next();
        position = b.next;
        const int64_t first = micro * tc.batch_size + par.dp_rank() * par.local_batch();
        batches.push_back(diffusion::flow_matching_batch(b.images, b.labels, cfg.flow, cfg.run.seed,
                                                         step, first));
      }
      parallel::PipelineStages stages = dit_stages(model, *pipe, batches);
      stages.loss = [&guard, step, loss = stages.loss](const Tensor& out, int64_t m) {
        return guard.guard_loss(loss(out, m), step);
      };
      loss_sum = par.run_pipeline_step(stages);
    }
    for (int64_t micro = 0; micro < tc.grad_accum && !par.pipeline(); ++micro) {
      Batch b = prefetch.next();
      position = b.next;
      // This rank's samples are entries dp_rank * local_batch.. of the micro-batch.
      const int64_t first = micro * tc.batch_size + par.dp_rank() * par.local_batch();
      Tensor loss = diffusion::flow_matching_loss(velocity, b.images, b.labels, cfg.flow,
                                                  cfg.run.seed, step, first);
      if (tc.grad_accum > 1) loss = mul_scalar(loss, 1.0 / double(tc.grad_accum));
      loss = guard.guard_loss(loss, step);
      par.begin_micro_step(micro, tc.grad_accum);
      backward(loss);
      par.after_backward(micro, tc.grad_accum);
      loss_sum += double(item(loss));
    }
    // The loss over the global batch, and whether any rank ran out of time (all must agree).
    const bool local_out_of_time =
        tc.max_minutes > 0 && progress.elapsed_seconds() > tc.max_minutes * 60;
    const std::vector<double> agreed = par.sum_over_dp({loss_sum, local_out_of_time ? 1.0 : 0.0});
    loss_sum = agreed[0] / double(par.dp_size());
    const double grad_norm = [&] {
      trace::Scope scope("clip_grad_norm", "optimizer");
      return par.clip_grad_norm(tc.grad_clip);
    }();
    const double lr = cfg.schedule.lr_at(step);
    const bool update = guard.accept(step, loss_sum, grad_norm);
    if (update) {
      trace::Scope scope("optimizer_step", "optimizer");
      opt.step(lr);
      par.after_optimizer_step();
    }
    par.zero_grad();
    if (guard.needs_rollback()) guard.roll_back(step, opt, ema_state());
    // Until ema_start the EMA just follows the weights; then it averages with a warm-up.
    if (update && step < tc.ema_start) {
      ema.reset_to_params();
    } else if (update) {
      ema.update(step - tc.ema_start);
    }
    guard.end_step(step, prefetch.waited_seconds());
    profiler.end_step(step);
    const bool last = step + 1 == tc.steps;
    if ((step + 1) % tc.log_every == 0 || last || step == start_step) {
      progress.log(step, loss_sum, lr,
                   Json::object({{"grad_norm", grad_norm}, {"skipped_steps", guard.skipped()}}));
    }
    const bool out_of_time = agreed[1] > 0;
    const bool preempted = guard.preempted();  // collective over the world
    const bool stop = out_of_time || preempted || (tc.stop_after > 0 && step + 1 == tc.stop_after);
    if ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last || stop) {
      guard.before_checkpoint(step);
      const std::string dir = save(step + 1, position);
      if (par.main()) std::printf("checkpoint %s\n", dir.c_str());
      guard.after_checkpoint(dir, step + 1);
    }
    if (preempted) guard.finish_preempted(step + 1);
    if (stop) {
      std::printf("stopping after step %lld (%s)\n", (long long)(step + 1),
                  out_of_time ? "time budget used" : "train.stop_after");
      ++step;
      break;
    }
  }

  profiler.finish();      // a run stopped inside the profile window still writes its trace
  par.wait_checkpoint();  // the last checkpoint is complete before the run reports or exits
  const double train_seconds = progress.elapsed_seconds();
  const double images_per_second =
      double((step - start_step) * tc.batch_size * tc.grad_accum) / std::max(train_seconds, 1e-9);
  std::printf("trained %lld steps in %s (%.1f images/s)\n", (long long)(step - start_step),
              format_duration(train_seconds).c_str(), images_per_second);
  const NamedTensors ema_weights = par.gather_full(ema_state()[0].second);  // collective
  if (!par.main()) return;  // samples and evaluation: the main rank alone

  // Samples from the EMA weights: one row per class.
  models::Dit ema_model(cfg.dit);
  load_state_dict(ema_model, as_map(ema_weights), "ema");
  DitSampleOptions so{cfg.sample.per_class,
                      cfg.sample.steps,
                      cfg.sample.cfg_scale,
                      cfg.sample.heun,
                      cfg.run.seed,
                      run_dir + "/samples.png",
                      ""};
  write_samples(ema_model, so);

  if (!cfg.eval.classifier.empty()) {
    const DitQuality q =
        evaluate_dit(ema_model, cfg.eval.classifier, cfg.data.path, cfg.eval.num_samples, so);
    write_json_file(run_dir + "/eval.json",
                    Json::object({{"step", step},
                                  {"samples", q.samples},
                                  {"class_accuracy", q.class_accuracy},
                                  {"fid", q.fid},
                                  {"fid_floor", q.fid_floor},
                                  {"fid_over_floor", q.fid / q.fid_floor},
                                  {"cfg_scale", so.cfg_scale},
                                  {"sample_steps", so.steps},
                                  {"train_seconds", train_seconds},
                                  {"images_per_second", images_per_second}}));
    std::printf(
        "eval: class accuracy %.1f%% of %lld samples, FID %.3f (real-data floor %.3f, "
        "ratio %.1f) -> %s/eval.json\n",
        100.0 * q.class_accuracy, (long long)q.samples, q.fid, q.fid_floor, q.fid / q.fid_floor,
        run_dir.c_str());
  }
}

void sample_dit(const std::string& ckpt_dir, const DitSampleOptions& options) {
  CheckpointReader reader(ckpt_dir);
  Json state = read_trainer_state(reader);
  LOOM_CHECK(state.at("model_kind").as_string() == "dit")
      << "sample: " << ckpt_dir << " is a checkpoint of a " << state.at("model_kind").as_string()
      << " model, not a DiT";
  const fs::path run_dir = fs::path(ckpt_dir).parent_path();
  const std::string config_path = (run_dir / "config.toml").string();
  LOOM_CHECK(fs::exists(config_path))
      << "sample: " << config_path << " not found (expected beside the checkpoint directory)";
  Config cfg = load_config(config_path);
  models::Dit model(cfg.dit);
  load_state_dict(model, as_map(reader.read_all("ema")), ckpt_dir + " (ema)");
  write_samples(model, options);
}

}  // namespace loom::train
