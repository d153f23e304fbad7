#include "loom/train/recipes/gpt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "loom/checkpoint/state_dict.h"
#include "loom/core/atomic_file.h"
#include "loom/core/json_file.h"
#include "loom/core/rng.h"
#include "loom/data/npy.h"
#include "loom/data/text.h"
#include "loom/data/token_windows.h"
#include "loom/models/gpt/generate.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/moe_balance.h"
#include "loom/train/recipes/caption_text.h"
#include "loom/train/recipes/gpt_hf.h"

namespace loom::train {

namespace fs = std::filesystem;

double LmEvalResult::bits_per_byte() const {
  return nats_per_byte() / std::log(2.0);
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The text file the GPT trains on: the King James Bible, a file, or the training canvases'
// captions, one a line (written into the cache directory).
std::string text_source(const Config& cfg) {
  if (cfg.data.dataset == Dataset::Kjv) return kjv_corpus(resolved_cache_dir(cfg));
  if (cfg.data.dataset != Dataset::Canvas) return cfg.data.path;
  std::string text;
  for (const std::string& c : training_captions(cfg, fashion_mnist(cfg.data.path, true)))
    text += c + "\n";
  const std::string path = resolved_cache_dir(cfg) + "/canvas_captions/seed" +
                           std::to_string(cfg.data.canvas_seed) + "-" +
                           std::to_string(cfg.data.canvases) + ".txt";
  fs::create_directories(fs::path(path).parent_path());
  write_file_atomic(path, text);  // the same text from every rank
  return path;
}

// The run's tokenizer; data.tokenizer "bpe": learned from the training text by a new run
// (run_dir ""), the run directory's copy afterwards.
Tokenizer load_tokenizer(const Config& cfg, const std::string& run_dir) {
  if (cfg.data.tokenizer != "bpe" || !run_dir.empty())
    return loom::load_tokenizer(cfg.data.tokenizer, cfg.data.tokenizer_pattern,
                                cfg.gpt().vocab_size, run_dir);
  const TextSplit split = split_text(read_text_file(text_source(cfg)), cfg.data.val_fraction);
  Tokenizer t;
  t.bytes = false;
  t.bpe = BpeTokenizer::train(std::string(split.train.begin(), split.train.end()),
                              int(cfg.gpt().vocab_size));
  return t;
}

TokenizedText load_lm_data(const Config& cfg, const Tokenizer& tok) {
  if (cfg.data.dataset == Dataset::Tokens)
    return open_token_dirs(cfg.data.paths, cfg.data.weights, cfg.gpt().vocab_size,
                           cfg.gpt().context + 2, tok, cfg.data.tokenizer_pattern);
  return tokenize_text(text_source(cfg), tok, cfg.data.val_fraction, cfg.gpt().context + 2);
}

Batch window_batch(const TokenSet& tokens, const std::vector<Window>& windows, int64_t T) {
  auto [ids, targets] = gather_windows(tokens, windows, T);  // (B, T) each
  return {ids, targets, Json()};
}

// This rank's part of a batch under context parallelism: its rows of every window, with their
// positions (rows empty: the whole batch, default positions), on the batch's device.
struct Shard {
  Tensor ids, targets, positions;
};

Shard local_rows(const Batch& b, const std::vector<int64_t>& rows) {
  if (rows.empty()) return {b.x, b.y, Tensor()};
  const int64_t B = b.x.size(0), T = b.x.size(1), n = int64_t(rows.size());
  const std::vector<int64_t> ids = to_vector_i64(b.x), targets = to_vector_i64(b.y);
  std::vector<int64_t> local_ids, local_targets;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t r : rows) {
      local_ids.push_back(ids[size_t(i * T + r)]);
      local_targets.push_back(targets[size_t(i * T + r)]);
    }
  const Device d = b.x.device();
  return {from_vector(local_ids, {B, n}, DType::I64, d),
          from_vector(local_targets, {B, n}, DType::I64, d), from_vector(rows, {n}, DType::I64, d)};
}

// The mean cross-entropy of a batch of windows (the whole model's forward, or a pipeline's).
using MeanLoss = std::function<double(const Batch&)>;

MeanLoss whole_model_loss(const models::Gpt& model, const std::vector<int64_t>& rows = {}) {
  return [&model, rows](const Batch& b) {
    const Shard s = local_rows(b, rows);  // (made on the host: evaluation windows)
    const Device d = model.device();
    return double(item(model.loss(to_device(s.ids, d), to_device(s.targets, d),
                                  s.positions.defined() ? to_device(s.positions, d) : Tensor())));
  };
}

// The GPT's pieces as this rank's pipeline stages: embedding before the first stage, its
// chunks' blocks, final norm, head and loss after the last; micro-batch m is batches[m] (its
// rows `rows` under context parallelism).
parallel::PipelineStages gpt_stages(const models::Gpt& model, const parallel::Pipeline& pipe,
                                    const std::vector<Batch>& batches,
                                    const std::vector<int64_t>& rows) {
  parallel::PipelineStages st;
  auto shards = std::make_shared<std::vector<Shard>>();
  for (const Batch& b : batches) shards->push_back(local_rows(b, rows));
  const Tensor& first_ids = shards->at(0).ids;  // (B, T)
  const Tensor pos =
      rows.empty() ? model.default_positions(first_ids.size(1)) : shards->at(0).positions;
  for (const auto& blocks : pipe.chunk_blocks)  // [begin, end) of each of this rank's chunks
    st.forward.push_back([&model, blocks, pos](const Tensor& h) {
      return model.run_blocks(h, pos, blocks.first, blocks.second);
    });
  st.input = [&model, shards, pos](int64_t m) {
    return model.embed(shards->at(size_t(m)).ids, pos);
  };
  st.loss = [&model, shards](const Tensor& out, int64_t m) {
    return model.criterion->forward(model.head(out), shards->at(size_t(m)).targets);
  };
  st.activation_shape = {first_ids.size(0), first_ids.size(1), model.config.width};
  st.device = model.device();
  return st;
}

MeanLoss pipeline_loss(const models::Gpt& model, const parallel::Pipeline& pipe,
                       const std::vector<int64_t>& rows) {
  return [&model, &pipe, rows](const Batch& b) {  // b: made on the host (evaluation windows)
    const Device d = model.device();
    const std::vector<Batch> one{Batch{to_device(b.x, d), to_device(b.y, d), Json()}};
    return parallel::run_pipeline_forward(gpt_stages(model, pipe, one, rows), pipe.schedule.chunks,
                                          pipe.group);
  };
}

LmEvalResult evaluate(const MeanLoss& mean_loss, int64_t T, const Tokenizer& tok,
                      const TokenSet& tokens, const std::vector<Window>& starts, int64_t batch,
                      int64_t min_forwards) {
  NoGradGuard no_grad;
  LmEvalResult r;
  // Under ZeRO-3 every forward gathers parameters with the other ranks: all ranks must run as
  // many forwards, so a rank with fewer windows runs discarded ones.
  for (int64_t extra = min_forwards - (int64_t(starts.size()) + batch - 1) / batch; extra > 0;
       --extra) {
    mean_loss(window_batch(tokens, {Window{}}, T));
  }
  for (size_t at = 0; at < starts.size(); at += size_t(batch)) {
    const size_t end = std::min(starts.size(), at + size_t(batch));
    const std::vector<Window> chunk(starts.begin() + ptrdiff_t(at),
                                    starts.begin() + ptrdiff_t(end));
    const Batch b = window_batch(tokens, chunk, T);
    const double mean = mean_loss(b);
    const int64_t n = int64_t(chunk.size()) * T;
    r.nats += mean * double(n);
    r.tokens += n;
    std::vector<int32_t> w(size_t(T + 1));
    for (const Window& win : chunk) {
      tokens.read(win.stream, win.start, T + 1, w.data());
      for (int64_t t = 1; t <= T; ++t) r.bytes += tok.bytes_of(w[size_t(t)]);
    }
  }
  r.windows = int64_t(starts.size());
  return r;
}

// evaluate() with the windows split over the data-parallel ranks and the sums combined.
LmEvalResult evaluate_over_dp(dist::ProcessGroup& dp, const MeanLoss& mean_loss, int64_t T,
                              const Tokenizer& tok, const TokenSet& tokens,
                              const std::vector<Window>& starts, int64_t batch) {
  const size_t n = starts.size(), P = size_t(dp.size()), r = size_t(dp.rank());
  const std::vector<Window> mine(starts.begin() + ptrdiff_t(r * n / P),
                                 starts.begin() + ptrdiff_t((r + 1) * n / P));
  const int64_t most = int64_t((n + P - 1) / P);
  LmEvalResult result =
      evaluate(mean_loss, T, tok, tokens, mine, batch, (most + batch - 1) / batch);
  const std::vector<double> total =
      sum_over(dp, {result.nats, double(result.tokens), double(result.bytes)});
  result.nats = total[0];
  result.tokens = int64_t(total[1]);
  result.bytes = int64_t(total[2]);
  result.windows = int64_t(n);
  return result;
}

Json eval_json(const LmEvalResult& r) {
  return Json::object({{"nats_per_token", r.nats_per_token()},
                       {"nats_per_byte", r.nats_per_byte()},
                       {"bits_per_byte", r.bits_per_byte()},
                       {"windows", r.windows},
                       {"tokens", r.tokens},
                       {"bytes", r.bytes}});
}

std::string eval_line(const LmEvalResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%.4f nats/token, %.4f nats/byte, %.4f bits/byte (%lld windows, %lld tokens, "
                "%lld bytes)",
                r.nats_per_token(), r.nats_per_byte(), r.bits_per_byte(), (long long)r.windows,
                (long long)r.tokens, (long long)r.bytes);
  return buf;
}

std::string generate(const models::Gpt& model, const Tokenizer& tok, const GptSampleOptions& o) {
  const std::string start = o.prompt.empty() ? "\n" : o.prompt;
  const std::vector<int32_t> prompt = tok.encode(start);
  const auto t0 = Clock::now();
  const std::string text = tok.decode(models::generate(
      model, prompt, {o.tokens, o.temperature, o.top_k, o.top_p, o.seed, o.kv_cache}));
  const double s = seconds_since(t0);
  const std::string how = o.kv_cache ? "KV cache of " +
                                           std::to_string(models::cache_bytes_per_position(model)) +
                                           " bytes a position"
                                     : "no cache: the whole window each token";
  std::fprintf(stderr, "sample: %lld prompt + %lld new tokens in %.2fs: %.1f new tokens/s (%s)\n",
               (long long)prompt.size(), (long long)o.tokens, s, double(o.tokens) / s, how.c_str());
  return o.prompt.empty() ? text.substr(start.size()) : text;
}

}  // namespace

LoadedGpt load_gpt_checkpoint(const std::string& ckpt_dir, const char* what) {
  LoadedGpt g;
  g.cfg = run_config_of(ckpt_dir, ModelKind::Gpt, what);
  g.tok = load_tokenizer(g.cfg, fs::path(ckpt_dir).parent_path().string());
  g.model = std::make_unique<models::Gpt>(g.cfg.gpt());
  load_state_dict(*g.model, as_map(CheckpointReader(ckpt_dir).read_all("model")),
                  ckpt_dir + " (model)");
  load_selection_biases(*g.model, ckpt_dir);  // a mixture's choices depend on them
  return g;
}

namespace {

class GptRecipe : public Recipe {
 public:
  // Everything that can fail on bad input is read here, before the run directory is touched.
  explicit GptRecipe(const Config& cfg)
      : cfg_(cfg),
        tok_(load_tokenizer(cfg, "")),
        data_(load_lm_data(cfg, tok_)),
        model_(cfg.gpt()) {
    model_.init_parameters(cfg.run.seed);
    if (!cfg.train.init_from.empty())  // fine-tuning: the weights of a Hugging Face model
      load_state_dict(model_, as_map(import_hf(cfg.train.init_from, cfg.gpt())),
                      cfg.train.init_from);
  }

  nn::Module& model() override { return model_; }
  nn::ParallelPlan parallel_plan() const override { return model_.parallel_plan(); }
  std::string describe() const override {
    const int64_t total = model_.num_parameters();
    return std::string("gpt (") + models::name_of(cfg_.gpt().style) +
           "): " + parameter_count(total, cfg_.gpt().active_parameters(total), cfg_.gpt().moe) +
           ", context " + std::to_string(cfg_.gpt().context);
  }
  std::string describe_data() const override {
    return "data: " + data_.source + ", " + (tok_.bytes ? "byte" : "BPE") + " tokens, " +
           std::to_string(data_.train.total()) + " train / " + std::to_string(data_.val.total()) +
           " held-out";
  }

  void start(RunContext& run) override {
    run_ = &run;
    rows_ = run.model.sequence_rows(cfg_.gpt().context);  // empty: whole sequences
    const parallel::Pipeline* pipe = run.model.pipeline();
    mean_loss_ = pipe ? pipeline_loss(model_, *pipe, rows_) : whole_model_loss(model_, rows_);
    periodic_windows_ = eval_windows(data_.val, cfg_.gpt().context, cfg_.eval.windows);
  }
  void write_run_files(const std::string& run_dir) const override {
    save_tokenizer_copy(tok_, run_dir);
    if (cfg_.data.tokenizer == "bpe") tok_.bpe.save(run_dir + "/tokenizer.bpe");  // learned
  }
  Json state(int64_t step) const override {
    return Json::object({{"tokens_seen", step * cfg_.train.batch_size * cfg_.gpt().context *
                                             cfg_.train.grad_accum}});
  }

  Batch make_batch(const Slot& s) override {
    const int64_t T = cfg_.gpt().context;
    const uint64_t key =
        RngKey{cfg_.run.seed, "lm.windows", "step " + std::to_string(s.step)}.hash();
    std::vector<Window> windows(static_cast<size_t>(s.count));
    for (int64_t b = 0; b < s.count; ++b)
      windows[size_t(b)] = draw_window(data_.train, key, s.first + b, T);
    return window_batch(data_.train, windows, T);
  }
  Tensor loss(const Batch& b, const Slot&) override {
    const Shard shard = local_rows(b, rows_);
    return model_.loss(shard.ids, shard.targets, shard.positions);
  }
  parallel::PipelineStages pipeline_stages(const parallel::Pipeline& pipe,
                                           const std::vector<Batch>& batches,
                                           const std::vector<Slot>&) override {
    return gpt_stages(model_, pipe, batches, rows_);
  }

  Json evaluate(int64_t step) override {
    const auto t0 = std::chrono::steady_clock::now();
    AutocastGuard exact(DType::F32);  // held-out figures in full precision
    const LmEvalResult r = evaluate_over_dp(run_->dp, mean_loss_, cfg_.gpt().context, tok_,
                                            data_.val, periodic_windows_, cfg_.train.batch_size);
    std::printf("eval   %6lld | held-out %s [%.1fs]\n", (long long)(step + 1), eval_line(r).c_str(),
                seconds_since(t0));
    return eval_json(r);
  }

  Json finish(const RunSummary& summary) override {
    // The final held-out loss, over the whole held-out split.
    const auto t0 = std::chrono::steady_clock::now();
    const LmEvalResult r =
        evaluate_over_dp(run_->dp, mean_loss_, cfg_.gpt().context, tok_, data_.val,
                         eval_windows(data_.val, cfg_.gpt().context, 0), cfg_.train.batch_size);
    // The text sample runs on the main rank alone, on a full copy of the weights (collective).
    std::unique_ptr<models::Gpt> full_model;
    if (cfg_.lm_sample.tokens > 0) {
      const parallel::NamedTensors weights = trained_weights(run_->model);  // collective
      if (run_->main) {
        full_model = std::make_unique<models::Gpt>(cfg_.gpt());
        load_state_dict(*full_model, as_map(weights), "the trained weights");
        full_model->to(model_.device());  // the sample runs on the training device
      }
    }
    if (!run_->main) return Json();  // the file and the text sample: the main rank alone
    Json result = eval_json(r);
    result.set("step", Json(summary.step));
    result.set("source", Json(data_.source));
    result.set("train_seconds", Json(summary.train_seconds));
    write_json_file(cfg_.run_dir() + "/eval.json", result);
    std::printf("final held-out loss at step %lld: %s [%.1fs] -> %s/eval.json\n",
                (long long)summary.step, eval_line(r).c_str(), seconds_since(t0),
                cfg_.run_dir().c_str());
    if (cfg_.lm_sample.tokens > 0) {
      GptSampleOptions so;
      so.prompt = cfg_.lm_sample.prompt;
      so.tokens = cfg_.lm_sample.tokens;
      so.temperature = cfg_.lm_sample.temperature;
      so.seed = cfg_.run.seed;
      std::printf("sample (%lld tokens, temperature %.2f):\n%s\n", (long long)so.tokens,
                  so.temperature, generate(*full_model, tok_, so).c_str());
    }
    return result;
  }

 private:
  const Config& cfg_;
  const Tokenizer tok_;
  const TokenizedText data_;
  models::Gpt model_;
  RunContext* run_ = nullptr;
  std::vector<int64_t> rows_;  // this rank's rows of each window under context parallelism
  MeanLoss mean_loss_;
  std::vector<Window> periodic_windows_;
};

}  // namespace

std::unique_ptr<Recipe> make_gpt_recipe(const Config& config) {
  return std::make_unique<GptRecipe>(config);
}

LmEvalResult eval_gpt(const std::string& ckpt_dir, int64_t windows) {
  LoadedGpt g = load_gpt_checkpoint(ckpt_dir, "eval");
  const TokenizedText data = load_lm_data(g.cfg, g.tok);
  const auto starts = eval_windows(data.val, g.cfg.gpt().context, windows);
  return evaluate(whole_model_loss(*g.model), g.model->config.context, g.tok, data.val, starts,
                  g.cfg.train.batch_size, 0);
}

std::string sample_gpt(const std::string& ckpt_dir, const GptSampleOptions& options) {
  LoadedGpt g = load_gpt_checkpoint(ckpt_dir, "sample");
  if (!options.logits_npy.empty()) {  // what another implementation of the model can check
    const std::vector<int32_t> ids = g.tok.encode(options.prompt);
    LOOM_CHECK(!ids.empty() && int64_t(ids.size()) <= g.cfg.gpt().context)
        << "sample --logits: the prompt must have 1 to " << g.cfg.gpt().context << " tokens, has "
        << ids.size();
    NoGradGuard no_grad;
    const Tensor x = from_vector(std::vector<int64_t>(ids.begin(), ids.end()),
                                 {1, int64_t(ids.size())});          // (1, T)
    write_npy(options.logits_npy, squeeze(g.model->forward(x), 0));  // (T, V)
  }
  return generate(*g.model, g.tok, options);
}

}  // namespace loom::train
