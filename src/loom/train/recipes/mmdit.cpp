#include "loom/train/recipes/mmdit.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/captions.h"
#include "loom/data/idx.h"
#include "loom/data/sampler.h"
#include "loom/diffusion/fid.h"
#include "loom/diffusion/png.h"
#include "loom/diffusion/preference.h"
#include "loom/ops/ops.h"
#include "loom/optim/ema.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/progress.h"
#include "loom/train/recipes/canvas_judge.h"
#include "loom/train/recipes/caption_text.h"
#include "loom/train/recipes/commands.h"
#include "loom/train/recipes/latents.h"
#include "loom/train/recipes/preference_pairs.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

diffusion::VelocityFn velocity_of(const models::Mmdit& model) {
  return [&model](const Tensor& x, const Tensor& t, const Tensor& caption) {
    return model.forward(x, t, caption);
  };
}

// What the model is told of canvases: their captions, or (data.captions = "classes", the
// class-label baseline) their items' classes alone.
std::vector<std::string> told_captions(const Config& cfg, const CanvasSet& set) {
  if (!cfg.data.class_captions) return set.captions;
  std::vector<std::string> out;
  for (const auto& items : set.items) out.push_back(canvas_class_caption(items));
  return out;
}

// The sample grid's captions: the first `rows` held-out ones, each row `per_row` samples.
constexpr int64_t kGridRows = 8;

// Writes `images` as a grid of `rows` rows and the rows' captions beside it (PATH.txt).
void write_caption_grid(const std::string& png_path, const Tensor& images, int64_t rows,
                        const std::vector<std::string>& captions) {
  const ImageGrid grid = image_grid(images, int(rows), int(images.size(0) / rows));
  write_png(png_path, grid.pixels, grid.width, grid.height, grid.channels);
  std::ofstream text(png_path + ".txt");
  for (const std::string& c : captions) text << c << "\n";
}

// Each of `captions` `per_row` times, in rows.
Tensor repeated_captions(const Tensor& captions, int64_t per_row) {
  std::vector<Tensor> rows;
  for (int64_t r = 0; r < captions.size(0); ++r)
    for (int64_t i = 0; i < per_row; ++i) rows.push_back(narrow(captions, 0, r, 1));
  return cat(rows, 0);
}

// The run directory of a checkpoint.
std::string run_dir_of(const std::string& ckpt_dir) {
  return fs::path(ckpt_dir).parent_path().string();
}

// A checkpoint's EMA weights with its run's config and caption text.
struct LoadedMmdit {
  Config cfg;
  CaptionText text;
  std::unique_ptr<models::Mmdit> model;
};

LoadedMmdit load_mmdit(const std::string& ckpt_dir, const char* what) {
  LoadedMmdit m;
  m.cfg = run_config_of(ckpt_dir, ModelKind::Mmdit, what);
  m.text = load_caption_text(m.cfg, fashion_mnist(m.cfg.data.path, /*train=*/true),
                             run_dir_of(ckpt_dir));
  m.model = std::make_unique<models::Mmdit>(m.cfg.mmdit());
  load_state_dict(*m.model, as_map(CheckpointReader(ckpt_dir).read_all("ema")),
                  ckpt_dir + " (ema)");
  m.text.attach(*m.model);
  return m;
}

class MmditRecipe : public Recipe {
 public:
  explicit MmditRecipe(const Config& cfg)
      : cfg_(cfg),
        source_(fashion_mnist(cfg.data.path, /*train=*/true)),
        // Post-training reads the captions as the reference did (its learned BPE).
        text_(load_caption_text(cfg, source_,
                                cfg.dpo.reference.empty() ? "" : run_dir_of(cfg.dpo.reference))),
        model_(cfg.mmdit()) {
    if (!cfg.data.latent.empty()) latent_ = load_latent_space(cfg.data.latent);
    model_.init_parameters(cfg.run.seed);
    text_.attach(model_);
    if (!cfg.dpo.reference.empty()) {
      // Diffusion-DPO: the run starts from the reference's EMA weights and keeps them, frozen,
      // whole on every rank (its forwards hold no collectives).
      LOOM_CHECK(cfg.parallel.topology.dims.pp == 1)
          << "dpo: no pipeline parallelism (parallel.pp " << cfg.parallel.topology.dims.pp
          << "): the loss compares each pair's two images through the whole model and the "
          << "reference";
      reference_ = std::move(load_mmdit(cfg.dpo.reference, "dpo.reference").model);
      load_state_dict(model_, as_map(state_dict(*reference_)), cfg.dpo.reference + " (ema)");
      judge_ = load_classifier(cfg.eval.classifier);
    }
  }

  nn::Module& model() override { return model_; }
  nn::ParallelPlan parallel_plan() const override { return model_.parallel_plan(); }
  std::string describe() const override {
    const models::MmditConfig& c = cfg_.mmdit();
    return "mmdit: " + std::to_string(model_.num_parameters()) + " parameters, " +
           (c.cross_attention ? "cross-attention to " : "joint attention over ") +
           std::to_string(c.text_length) + " caption + " + std::to_string(c.image_tokens()) +
           " image tokens; captions " +
           (text_.gpt ? "through the frozen GPT " + cfg_.data.text_encoder
            : text_.tokenizer.words()
                ? std::string("as words")
                : "as " + std::to_string(text_.tokenizer.bpe().vocab_size()) + " BPE tokens") +
           (reference_ ? "; Diffusion-DPO against the frozen " + cfg_.dpo.reference : "");
  }
  std::string describe_data() const override {
    return "data: " + std::to_string(cfg_.data.canvases) + " captioned canvases (seed " +
           std::to_string(cfg_.data.canvas_seed) + ") of Fashion-MNIST items from " +
           cfg_.data.path + (latent_ ? ", as the latents of the autoencoder " + latent_->dir : "");
  }

  void start(RunContext& run) override {
    run_ = &run;
    ema_ = std::make_unique<optim::Ema>(run.model.piece_parameters(), cfg_.train.ema_decay);
    if (reference_) {
      reference_->to(cfg_.train.device);
      pairs_ = cached_preference_pairs(*reference_, text_.tokenizer, latent_.get(), *judge_,
                                       source_, cfg_, sample_options(), run.dp);
      sampler_ = shuffled_sampler(pairs_.images.size(0), cfg_, run);
      return;
    }
    sampler_ = shuffled_sampler(cfg_.data.canvases, cfg_, run);
    if (latent_)
      latents_ = cached_canvas_latents(*latent_, source_, uint64_t(cfg_.data.canvas_seed),
                                       cfg_.data.canvases, run.dp);
  }
  void write_run_files(const std::string& run_dir) const override {
    save_caption_text(text_, run_dir);
  }
  std::vector<PieceState> piece_state() override { return {ema_piece_state(*ema_)}; }
  void resume(const Json& state) override { resume_sampler(*sampler_, state); }

  // Canvases are drawn as the sampler picks them: each from (canvas_seed, index) alone; in
  // latent space their images are the cached latents.
  Batch make_batch(const Slot&) override {
    const std::vector<int64_t> idx = sampler_->next_batch();
    if (reference_) return preference_batch(idx);
    std::vector<Tensor> images;
    std::vector<std::string> captions;
    for (int64_t i : idx) {
      Canvas c = make_canvas(source_, uint64_t(cfg_.data.canvas_seed), /*test=*/false, i);
      images.push_back(c.image);
      captions.push_back(cfg_.data.class_captions ? canvas_class_caption(c.items)
                                                  : std::move(c.caption));
    }
    const Sampler::State next = sampler_->state();
    NoGradGuard no_grad;
    const Tensor x = latent_ ? index_select(latents_, 0, from_vector(idx, {int64_t(idx.size())}))
                             : stack(images, 0);
    return {x, text_.tokenizer.encode_all(captions, cfg_.mmdit().text_length),
            Json::object({{"sampler_epoch", next.epoch}, {"sampler_position", next.position}})};
  }
  Tensor loss(const Batch& b, const Slot& s) override {
    if (reference_) {
      const Shape image{b.x.size(0), b.x.size(2), b.x.size(3), b.x.size(4)};
      const Tensor preferred = reshape(contiguous(narrow(b.x, 1, 0, 1)), image);
      const Tensor rejected = reshape(contiguous(narrow(b.x, 1, 1, 1)), image);
      return diffusion::diffusion_dpo_loss(velocity_of(model_), velocity_of(*reference_), preferred,
                                           rejected, b.y, cfg_.flow, cfg_.dpo.beta, cfg_.run.seed,
                                           s.step, s.first);
    }
    return diffusion::flow_matching_loss(velocity_of(model_), b.x, b.y, cfg_.flow, cfg_.run.seed,
                                         s.step, s.first);
  }
  // The joint sequence (B, L + T, D) travels between stages, with the conditioning.
  parallel::PipelineStages pipeline_stages(const parallel::Pipeline& pipe,
                                           const std::vector<Batch>& batches,
                                           const std::vector<Slot>& slots) override {
    return conditioned_pipeline_stages(model_, pipe, batches, slots, cfg_, cfg_.mmdit().tokens(),
                                       cfg_.mmdit().width);
  }

  // The flow-matching loss of the trained weights on the first eval.val_images test canvases.
  double held_out_loss() {
    const int64_t n = cfg_.eval.val_images;
    if (!val_images_.defined()) {
      const CanvasSet v = make_canvases(fashion_mnist(cfg_.data.path, /*train=*/false),
                                        uint64_t(cfg_.data.canvas_seed), /*test=*/true, 0, n);
      val_images_ = latent_ ? latent_->encode(v.images) : v.images;
      val_captions_ = text_.tokenizer.encode_all(told_captions(cfg_, v), cfg_.mmdit().text_length);
    }
    return held_out_flow_loss(velocity_of(model_), val_images_, val_captions_, n, cfg_.flow,
                              cfg_.run.seed, run_->dp, model_.device());
  }
  bool has_held_out() const {
    return cfg_.eval.val_images > 0 && cfg_.parallel.topology.dims.pp == 1;
  }
  Json evaluate(int64_t step) override {
    if (!has_held_out()) return Json();
    const double loss = held_out_loss();
    std::printf("eval   %6lld | held-out loss %.5f (%lld test canvases)\n", (long long)(step + 1),
                loss, (long long)cfg_.eval.val_images);
    return Json::object({{"loss", loss}});
  }

  void after_step(int64_t step, bool updated) override {
    follow_weights(*ema_, run_->model, cfg_, step, updated);
  }

  std::vector<Image> images(int64_t step) override {
    const std::unique_ptr<models::Mmdit> ema = gathered_ema();
    if (!ema) return {};
    char name[32];
    std::snprintf(name, sizeof name, "step-%06lld.png", (long long)(step + 1));
    fs::create_directories(cfg_.run_dir() + "/samples");
    const std::string path = cfg_.run_dir() + "/samples/" + name;
    ImageGrid grid = write_grid(*ema, path);
    std::printf("samples %6lld | %s\n", (long long)(step + 1), path.c_str());
    return {{"samples", std::move(grid)}};
  }

  Json finish(const RunSummary& summary) override {
    const bool held_out = has_held_out();
    const double val_loss = held_out ? held_out_loss() : 0;
    if (held_out && run_->main)
      std::printf("final held-out loss at step %lld: %.5f (%lld test canvases)\n",
                  (long long)summary.step, val_loss, (long long)cfg_.eval.val_images);
    const std::unique_ptr<models::Mmdit> ema = gathered_ema();
    if (!ema) return Json();
    Json result = Json::object({{"step", summary.step}});
    if (held_out) result.set("val_loss", val_loss);
    write_grid(*ema, cfg_.run_dir() + "/samples.png");
    std::printf(
        "samples: %lld held-out captions x %lld -> %s/samples.png (captions in "
        "samples.png.txt)\n",
        (long long)kGridRows, (long long)cfg_.sample.per_class, cfg_.run_dir().c_str());
    if (cfg_.eval.classifier.empty()) return held_out ? result : Json();
    const DitSampleOptions so = sample_options();
    const CanvasQuality q = evaluate_mmdit(*ema, text_.tokenizer, cfg_, cfg_.eval.classifier,
                                           cfg_.eval.num_samples, so, latent_.get());
    const Json quality = canvas_quality_json(q, so);
    for (const auto& [key, value] : quality.items()) result.set(key, value);
    result.set("train_seconds", summary.train_seconds);
    write_json_file(cfg_.run_dir() + "/eval.json", result);
    std::printf(
        "eval: captions all right %.1f%% of %lld held-out captions (places %.1f%%, sizes "
        "%.1f%%, classes %.1f%%), FID %.2f (real-canvas floor %.2f) -> %s/eval.json\n",
        100 * q.caption, (long long)q.samples, 100 * q.place, 100 * q.size, 100 * q.cls, q.fid,
        q.fid_floor, cfg_.run_dir().c_str());
    return result;
  }

 private:
  // Pairs `idx` (B, 2, C, H, W), preferred first, and their captions.
  Batch preference_batch(const std::vector<int64_t>& idx) {
    std::vector<std::string> captions;
    for (int64_t i : idx) captions.push_back(pairs_.captions[size_t(i)]);
    const Sampler::State next = sampler_->state();
    NoGradGuard no_grad;
    return {index_select(pairs_.images, 0, from_vector(idx, {int64_t(idx.size())})),
            text_.tokenizer.encode_all(captions, cfg_.mmdit().text_length),
            Json::object({{"sampler_epoch", next.epoch}, {"sampler_position", next.position}})};
  }
  std::unique_ptr<models::Mmdit> gathered_ema() {
    const parallel::NamedTensors weights = run_->model.gather_full(piece_state()[0].second);
    if (!run_->main) return nullptr;
    auto model = std::make_unique<models::Mmdit>(cfg_.mmdit());
    load_state_dict(*model, as_map(weights), "ema");
    text_.attach(*model);
    model->to(model_.device());
    return model;
  }
  DitSampleOptions sample_options() const {
    DitSampleOptions o;
    o.per_class = cfg_.sample.per_class;
    o.steps = cfg_.sample.steps;
    o.cfg_scale = cfg_.sample.cfg_scale;
    o.heun = cfg_.sample.heun;
    o.seed = cfg_.run.seed;
    o.device = model_.device();
    o.precision = cfg_.train.precision;
    o.shift = cfg_.flow.shift;
    return o;
  }
  // The first kGridRows held-out captions, sample.per_class samples each, as a grid.
  ImageGrid write_grid(const models::Mmdit& model, const std::string& path) {
    const CanvasSet v = make_canvases(fashion_mnist(cfg_.data.path, false),
                                      uint64_t(cfg_.data.canvas_seed), true, 0, kGridRows);
    const Tensor captions = repeated_captions(
        text_.tokenizer.encode_all(told_captions(cfg_, v), cfg_.mmdit().text_length),
        cfg_.sample.per_class);
    const Tensor images = sample_canvases(model, captions, sample_options(), latent_.get());
    write_caption_grid(path, images, kGridRows, v.captions);
    return image_grid(images, int(kGridRows), int(cfg_.sample.per_class));
  }

  const Config& cfg_;
  ImageDataset source_;  // Fashion-MNIST's training split: the training canvases' items
  CaptionText text_;     // how the captions reach the text encoder
  models::Mmdit model_;
  std::unique_ptr<LatentSpace> latent_;  // model.latent's autoencoder; null: pixel space
  Tensor latents_;                       // the training canvases' latents (latent space only)
  Tensor val_images_, val_captions_;     // the held-out canvases, made at the first evaluation
  RunContext* run_ = nullptr;
  std::unique_ptr<optim::Ema> ema_;
  std::unique_ptr<Sampler> sampler_;
  // Diffusion-DPO (dpo.reference): the frozen reference, the judge and the pairs.
  std::unique_ptr<models::Mmdit> reference_;
  std::unique_ptr<models::Vit> judge_;
  PreferencePairs pairs_;
};

}  // namespace

std::unique_ptr<Recipe> make_mmdit_recipe(const Config& config) {
  return std::make_unique<MmditRecipe>(config);
}

CanvasSet make_canvases(const ImageDataset& source, uint64_t seed, bool test, int64_t first,
                        int64_t count) {
  CanvasSet set;
  std::vector<Tensor> images;
  for (int64_t i = first; i < first + count; ++i) {
    Canvas c = make_canvas(source, seed, test, i);
    images.push_back(c.image);
    set.captions.push_back(std::move(c.caption));
    set.items.push_back(std::move(c.items));
  }
  NoGradGuard no_grad;
  set.images = stack(images, 0);  // (count, 1, 64, 64)
  return set;
}

Tensor sample_canvases(const models::Mmdit& model, const Tensor& captions,
                       const DitSampleOptions& options, const LatentSpace* latent) {
  DitSampleOptions o = options;
  o.latent = latent;
  return sample_images(velocity_of(model), model.config.channels, model.config.image_size,
                       CaptionVocab::kNull, captions, o);
}

CanvasQuality evaluate_mmdit(const models::Mmdit& model, const CaptionTokenizer& tokenizer,
                             const Config& run, const std::string& classifier_dir, int64_t count,
                             const DitSampleOptions& options, const LatentSpace* latent) {
  LOOM_CHECK(count >= 2) << "eval: need at least 2 samples for a Fréchet distance, got " << count;
  const auto classifier = load_classifier(classifier_dir);
  const ImageDataset test = fashion_mnist(run.data.path, /*train=*/false);
  const uint64_t seed = uint64_t(run.data.canvas_seed);
  // The captions asked for, and as many other real test canvases for the floor.
  const CanvasSet asked = make_canvases(test, seed, true, 0, count);
  const CanvasSet other = make_canvases(test, seed, true, count, count);
  std::printf("eval: sampling %lld canvases for held-out captions\n", (long long)count);
  std::fflush(stdout);
  const Tensor captions = tokenizer.encode_all(told_captions(run, asked), model.config.text_length);
  const Tensor samples = sample_canvases(model, captions, options, latent);
  const CanvasScores s = score_canvases(read_canvases(*classifier, samples), asked.items);
  CanvasQuality q;
  q.samples = count;
  q.caption = s.caption;
  q.place = s.place;
  q.size = s.size;
  q.cls = s.cls;
  const diffusion::FeatureStats reference =
      diffusion::feature_stats(canvas_features(*classifier, asked.images));
  q.fid = diffusion::frechet_distance(
      diffusion::feature_stats(canvas_features(*classifier, samples)), reference);
  q.fid_floor = diffusion::frechet_distance(
      diffusion::feature_stats(canvas_features(*classifier, other.images)), reference);
  return q;
}

Json canvas_quality_json(const CanvasQuality& q, const DitSampleOptions& o) {
  return Json::object({{"samples", q.samples},
                       {"caption_accuracy", q.caption},
                       {"place_accuracy", q.place},
                       {"size_accuracy", q.size},
                       {"class_accuracy", q.cls},
                       {"fid", q.fid},
                       {"fid_floor", q.fid_floor},
                       {"sample_steps", o.steps},
                       {"sampler", o.heun ? "heun" : "euler"},
                       {"cfg_scale", o.cfg_scale}});
}

void sample_mmdit_command(const SampleCall& call) {
  const LoadedMmdit m = load_mmdit(call.checkpoint, "sample");
  const Config& cfg = m.cfg;
  DitSampleOptions o = call.dit;
  o.precision = cfg.train.precision;
  o.shift = cfg.flow.shift;
  std::vector<std::string> captions;
  if (!call.prompt.empty()) {
    captions = {call.prompt};
  } else {  // the first held-out captions
    captions = make_canvases(fashion_mnist(cfg.data.path, false), uint64_t(cfg.data.canvas_seed),
                             true, 0, kGridRows)
                   .captions;
  }
  Tensor ids;
  try {
    ids = m.text.tokenizer.encode_all(captions, cfg.mmdit().text_length);
  } catch (const Error& e) {
    throw FlagError("--prompt", e.message());
  }
  const std::unique_ptr<LatentSpace> latent =
      cfg.data.latent.empty() ? nullptr : load_latent_space(cfg.data.latent);
  const Tensor images =
      sample_canvases(*m.model, repeated_captions(ids, o.per_class), o, latent.get());
  write_caption_grid(o.png_path, images, int64_t(captions.size()), captions);
  std::printf("samples: %lld canvases (%lld %s steps, cfg %.2f) -> %s, captions in %s.txt\n",
              (long long)images.size(0), (long long)o.steps, o.heun ? "Heun" : "Euler", o.cfg_scale,
              o.png_path.c_str(), o.png_path.c_str());
}

void eval_mmdit_command(const EvalCall& call) {
  const LoadedMmdit m = load_mmdit(call.checkpoint, "eval");
  const Config& cfg = m.cfg;
  const DitSampleOptions o = eval_sample_options(cfg, call);
  const std::unique_ptr<LatentSpace> latent =
      cfg.data.latent.empty() ? nullptr : load_latent_space(cfg.data.latent);
  const CanvasQuality q = evaluate_mmdit(*m.model, m.text.tokenizer, cfg, call.classifier,
                                         call.samples, o, latent.get());
  Json out = canvas_quality_json(q, o);
  write_json_file(call.out, out);
  std::printf(
      "%s: captions all right %.1f%% of %lld held-out captions (places %.1f%%, sizes %.1f%%, "
      "classes %.1f%%), FID %.2f (real-canvas floor %.2f), cfg %.2f, %lld %s steps -> %s\n",
      call.checkpoint.c_str(), 100 * q.caption, (long long)q.samples, 100 * q.place, 100 * q.size,
      100 * q.cls, q.fid, q.fid_floor, o.cfg_scale, (long long)o.steps, o.heun ? "Heun" : "Euler",
      call.out.c_str());
}

}  // namespace loom::train
