#include "loom/train/lm_trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "loom/checkpoint/json_file.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/atomic_file.h"
#include "loom/core/rng.h"
#include "loom/core/trace.h"
#include "loom/data/bpe.h"
#include "loom/data/prefetch.h"
#include "loom/data/text.h"
#include "loom/dist/world.h"
#include "loom/models/gpt/gpt.h"
#include "loom/ops/ops.h"
#include "loom/train/bench.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/parallel_run.h"
#include "loom/train/profiler.h"
#include "loom/train/progress.h"
#include "loom/train/step_guard.h"

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

// The tokenizer of a run: the plain byte tokenizer ("bytes") or a saved BPE.
struct LmTokenizer {
  bool bytes = true;
  BpeTokenizer bpe;  // the 256 byte tokens when bytes

  std::vector<int32_t> encode(const std::string& text) const {
    if (!bytes) return bpe.encode(text);
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = int32_t(uint8_t(text[i]));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const { return bpe.decode(ids); }
  int64_t bytes_of(int32_t id) const { return bytes ? 1 : int64_t(bpe.token_bytes(id).size()); }
};

// `bpe_copy`: the tokenizer file saved in the run directory, preferred when it exists (a run
// directory stays usable if the original file moves).
LmTokenizer load_tokenizer(const Config& cfg, const std::string& bpe_copy) {
  LmTokenizer t;
  if (cfg.data.tokenizer == "bytes") {
    LOOM_CHECK(cfg.gpt.vocab_size == BpeTokenizer::kByteTokens)
        << "data.tokenizer \"bytes\" has 256 tokens but model.vocab_size is " << cfg.gpt.vocab_size;
    return t;
  }
  t.bytes = false;
  const std::string path =
      !bpe_copy.empty() && fs::is_regular_file(bpe_copy) ? bpe_copy : cfg.data.tokenizer;
  LOOM_CHECK(fs::is_regular_file(path))
      << "data.tokenizer " << path << " does not exist (expected \"bytes\" or a BPE file made by "
      << "`loom tokenizer train`)";
  t.bpe = BpeTokenizer::load(path);
  LOOM_CHECK(t.bpe.vocab_size() == cfg.gpt.vocab_size)
      << "data.tokenizer " << path << " has " << t.bpe.vocab_size()
      << " tokens but model.vocab_size is " << cfg.gpt.vocab_size;
  return t;
}

struct LmData {
  std::string source;  // the text file
  std::vector<int32_t> train, val;
};

LmData load_lm_data(const Config& cfg, const LmTokenizer& tok) {
  LmData d;
  d.source = cfg.data.dataset == "kjv" ? kjv_corpus(resolved_cache_dir(cfg)) : cfg.data.path;
  const std::string text = read_text_file(d.source);
  TextSplit split = split_text(text, cfg.data.val_fraction);
  d.train = tok.encode(std::string(split.train.begin(), split.train.end()));
  d.val = tok.encode(std::string(split.val.begin(), split.val.end()));
  const int64_t need = cfg.gpt.context + 2;
  LOOM_CHECK(int64_t(d.train.size()) >= need && int64_t(d.val.size()) >= need)
      << "text " << d.source << " (" << text.size() << " bytes) is too short: its training and "
      << "held-out parts have " << d.train.size() << " and " << d.val.size()
      << " tokens, each needs at least model.context + 2 = " << need;
  return d;
}

// Start of window g of `step`: uniform over [0, n - T), from Philox keyed by (seed, step).
int64_t window_start(uint64_t key, int64_t g, int64_t n, int64_t T) {
  const auto r = philox4x32_10(uint64_t(g), 0, key);
  const uint64_t v = uint64_t(r[0]) << 32 | r[1];
  return int64_t(v % uint64_t(n - T));
}

struct Batch {
  Tensor ids, targets;  // (B, T) i64 each
};

// Windows of T + 1 tokens at `starts`: ids are the first T, targets the last T.
Batch gather_windows(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts,
                     int64_t T) {
  const int64_t B = int64_t(starts.size());
  std::vector<int64_t> ids(size_t(B * T)), targets(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      ids[size_t(b * T + t)] = tokens[size_t(starts[size_t(b)] + t)];
      targets[size_t(b * T + t)] = tokens[size_t(starts[size_t(b)] + t + 1)];
    }
  return {from_vector(ids, {B, T}), from_vector(targets, {B, T})};
}

// Starts of the evaluation windows: `count` of the non-overlapping tiles i * T of the
// held-out tokens, spread evenly (count = 0 or more than there are: all of them).
std::vector<int64_t> eval_window_starts(int64_t n, int64_t T, int64_t count) {
  const int64_t tiles = (n - 1) / T;
  std::vector<int64_t> starts;
  if (count <= 0 || count >= tiles) {
    for (int64_t i = 0; i < tiles; ++i) starts.push_back(i * T);
  } else if (count == 1) {
    starts.push_back(0);
  } else {
    for (int64_t i = 0; i < count; ++i) starts.push_back(i * (tiles - 1) / (count - 1) * T);
  }
  return starts;
}

// This rank's part of a batch under context parallelism: its rows of every window, with their
// positions (rows empty: the whole batch, default positions).
struct Shard {
  Tensor ids, targets, positions;
};

Shard local_rows(const Batch& b, const std::vector<int64_t>& rows) {
  if (rows.empty()) return {b.ids, b.targets, Tensor()};
  const int64_t B = b.ids.size(0), T = b.ids.size(1), n = int64_t(rows.size());
  const std::vector<int64_t> ids = to_vector_i64(b.ids), targets = to_vector_i64(b.targets);
  std::vector<int64_t> local_ids, local_targets;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t r : rows) {
      local_ids.push_back(ids[size_t(i * T + r)]);
      local_targets.push_back(targets[size_t(i * T + r)]);
    }
  return {from_vector(local_ids, {B, n}), from_vector(local_targets, {B, n}),
          from_vector(rows, {n})};
}

// The mean cross-entropy of a batch of windows (the whole model's forward, or a pipeline's).
using MeanLoss = std::function<double(const Batch&)>;

MeanLoss whole_model_loss(const models::Gpt& model, const std::vector<int64_t>& rows = {}) {
  return [&model, rows](const Batch& b) {
    const Shard s = local_rows(b, rows);
    return double(item(model.loss(s.ids, s.targets, s.positions)));
  };
}

// The GPT's pieces as this rank's pipeline stages: embedding before the first stage, its
// chunks' blocks, final norm, head and loss after the last; micro-batch m is batches[m] (its
// rows `rows` under context parallelism).
parallel::PipelineStages gpt_stages(const models::Gpt& model, const ParallelRun::Pipeline& pipe,
                                    const std::vector<Batch>& batches,
                                    const std::vector<int64_t>& rows) {
  parallel::PipelineStages st;
  auto shards = std::make_shared<std::vector<Shard>>();
  for (const Batch& b : batches) shards->push_back(local_rows(b, rows));
  const Tensor& first_ids = shards->at(0).ids;
  const Tensor pos =
      rows.empty() ? model.default_positions(first_ids.size(1)) : shards->at(0).positions;
  for (const auto& [begin, end] : pipe.chunk_blocks)
    st.forward.push_back([&model, begin, end, pos](const Tensor& x) {
      Tensor h = x;
      for (int64_t i = begin; i < end; ++i) {
        const auto& block = model.blocks[size_t(i)];
        h = block->call({h}, [&block, pos](const auto& in) { return block->forward(in[0], pos); });
      }
      return h;
    });
  st.input = [&model, shards, pos](int64_t m) {
    return model.embed(shards->at(size_t(m)).ids, pos);
  };
  st.loss = [&model, shards](const Tensor& out, int64_t m) {
    return model.criterion->forward(model.head(out), shards->at(size_t(m)).targets);
  };
  st.activation_shape = {first_ids.size(0), first_ids.size(1), model.config.width};
  return st;
}

MeanLoss pipeline_loss(const models::Gpt& model, const ParallelRun::Pipeline& pipe,
                       const std::vector<int64_t>& rows) {
  return [&model, &pipe, rows](const Batch& b) {
    const std::vector<Batch> one{b};
    return parallel::run_pipeline_forward(gpt_stages(model, pipe, one, rows), pipe.schedule.chunks,
                                          pipe.group);
  };
}

LmEvalResult evaluate(const MeanLoss& mean_loss, int64_t T, const LmTokenizer& tok,
                      const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts,
                      int64_t batch, int64_t min_forwards) {
  NoGradGuard no_grad;
  LmEvalResult r;
  // Under ZeRO-3 every forward gathers parameters with the other ranks: all ranks must run as
  // many forwards, so a rank with fewer windows runs discarded ones.
  for (int64_t extra = min_forwards - (int64_t(starts.size()) + batch - 1) / batch; extra > 0;
       --extra) {
    mean_loss(gather_windows(tokens, {0}, T));
  }
  for (size_t at = 0; at < starts.size(); at += size_t(batch)) {
    const size_t end = std::min(starts.size(), at + size_t(batch));
    const std::vector<int64_t> chunk(starts.begin() + ptrdiff_t(at),
                                     starts.begin() + ptrdiff_t(end));
    Batch b = gather_windows(tokens, chunk, T);
    const double mean = mean_loss(b);
    const int64_t n = int64_t(chunk.size()) * T;
    r.nats += mean * double(n);
    r.tokens += n;
    for (int64_t s : chunk)
      for (int64_t t = 1; t <= T; ++t) r.bytes += tok.bytes_of(tokens[size_t(s + t)]);
  }
  r.windows = int64_t(starts.size());
  return r;
}

// evaluate() with the windows split over the data-parallel ranks and the sums combined.
LmEvalResult evaluate_over_dp(const ParallelRun& par, const MeanLoss& mean_loss, int64_t T,
                              const LmTokenizer& tok, const std::vector<int32_t>& tokens,
                              const std::vector<int64_t>& starts, int64_t batch) {
  const size_t n = starts.size(), P = size_t(par.dp_size()), r = size_t(par.dp_rank());
  const std::vector<int64_t> mine(starts.begin() + ptrdiff_t(r * n / P),
                                  starts.begin() + ptrdiff_t((r + 1) * n / P));
  const int64_t most = int64_t((n + P - 1) / P);
  LmEvalResult result =
      evaluate(mean_loss, T, tok, tokens, mine, batch, (most + batch - 1) / batch);
  const std::vector<double> total =
      par.sum_over_dp({result.nats, double(result.tokens), double(result.bytes)});
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

std::string generate(const models::Gpt& model, const LmTokenizer& tok, const GptSampleOptions& o) {
  NoGradGuard no_grad;
  LOOM_CHECK(o.tokens >= 0 && o.temperature >= 0)
      << "sample: tokens and temperature must be non-negative";
  const std::string start = o.prompt.empty() ? "\n" : o.prompt;
  std::vector<int32_t> ids = tok.encode(start);
  const int64_t V = model.config.vocab_size, C = model.config.context;
  const uint64_t key = RngKey{o.seed, "lm.sample", ""}.hash();
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t W = std::min<int64_t>(int64_t(ids.size()), C);
    std::vector<int64_t> window(ids.end() - W, ids.end());
    const std::vector<float> logits = to_vector(model.forward(from_vector(window, {1, W})));
    const float* last = logits.data() + (W - 1) * V;  // (V)
    int32_t next = int32_t(std::max_element(last, last + V) - last);
    if (o.temperature > 0) {
      // Softmax of logits / temperature, then the inverse CDF at a Philox uniform.
      std::vector<double> p(static_cast<size_t>(V));
      double total = 0;
      for (int64_t v = 0; v < V; ++v) {
        p[size_t(v)] = std::exp(double(last[v] - last[next]) / o.temperature);
        total += p[size_t(v)];
      }
      double u = double(uniform_at(key, uint64_t(i))) * total;
      for (int64_t v = 0; v < V; ++v) {
        u -= p[size_t(v)];
        if (u < 0 || v == V - 1) {
          next = int32_t(v);
          break;
        }
      }
    }
    ids.push_back(next);
  }
  const std::string text = tok.decode(ids);
  return o.prompt.empty() ? text.substr(start.size()) : text;
}

// The run's config, read from config.toml beside a checkpoint directory.
Config config_beside(const std::string& ckpt_dir, const char* what) {
  const fs::path run_dir = fs::path(ckpt_dir).parent_path();
  const std::string config_path = (run_dir / "config.toml").string();
  LOOM_CHECK(fs::exists(config_path))
      << what << ": " << config_path << " not found (expected beside the checkpoint directory)";
  return load_config(config_path);
}

// Loads a GPT checkpoint's model weights and its run's config and tokenizer.
struct LoadedGpt {
  Config cfg;
  LmTokenizer tok;
  std::unique_ptr<models::Gpt> model;
};

LoadedGpt load_gpt_checkpoint(const std::string& ckpt_dir, const char* what) {
  const std::string kind = checkpoint_model_kind(ckpt_dir);
  LOOM_CHECK(kind == "gpt") << what << ": " << ckpt_dir << " is a checkpoint of a " << kind
                            << " model, not a GPT";
  LoadedGpt g;
  g.cfg = config_beside(ckpt_dir, what);
  LOOM_CHECK(g.cfg.model_kind == "gpt")
      << what << ": the config beside " << ckpt_dir << " is of model.kind " << g.cfg.model_kind;
  const fs::path run_dir = fs::path(ckpt_dir).parent_path();
  g.tok = load_tokenizer(g.cfg, (run_dir / "tokenizer.bpe").string());
  g.model = std::make_unique<models::Gpt>(g.cfg.gpt);
  load_state_dict(*g.model, as_map(CheckpointReader(ckpt_dir).read_all("model")),
                  ckpt_dir + " (model)");
  return g;
}

}  // namespace

std::string checkpoint_model_kind(const std::string& ckpt_dir) {
  return read_trainer_state(CheckpointReader(ckpt_dir)).at("model_kind").as_string();
}

void train_gpt(const Config& cfg, const std::string& resume_from) {
  LOOM_CHECK(cfg.model_kind == "gpt") << "train_gpt: model.kind is " << cfg.model_kind;
  const auto& tc = cfg.train;
  const int64_t B = tc.batch_size, T = cfg.gpt.context;
  const std::string run_dir = cfg.run_dir();
  ParallelRun par(cfg);
  const int64_t local_B = par.local_batch();

  // Everything that can fail on bad input is read before the run directory is touched.
  const LmTokenizer tok = load_tokenizer(cfg, "");
  const LmData data = load_lm_data(cfg, tok);
  models::Gpt model(cfg.gpt);
  model.init_parameters(cfg.run.seed);
  optim::AdamW& opt = par.setup(model, model.block_names(), model.parallel_plan(), cfg.adamw);

  int64_t start_step = 0;
  if (!resume_from.empty()) {
    const std::string& ckpt = resume_from;
    CheckpointReader reader(ckpt);
    Json state = read_trainer_state(reader);
    LOOM_CHECK(state.at("model_kind").as_string() == "gpt")
        << "checkpoint " << ckpt << " is of model kind " << state.at("model_kind").as_string()
        << ", not gpt";
    par.load_checkpoint(reader, {});
    start_step = state.at("step").as_int();
    opt.set_steps_taken(state.at("optimizer_steps").as_int());
    std::printf("resumed from %s at step %lld\n", ckpt.c_str(), (long long)start_step);
  }
  // Only a run that starts (or validly resumes) records its config: a failed --resume must
  // not overwrite the config of the run it refused.
  if (par.main()) {
    fs::create_directories(run_dir);
    write_file_atomic(run_dir + "/config.toml", cfg.resolved_toml);
    if (!tok.bytes) tok.bpe.save(run_dir + "/tokenizer.bpe");
  }
  std::printf("gpt (%s): %lld parameters, context %lld, batch %lld x %lld, %d threads, %s\n",
              cfg.gpt.style.c_str(), (long long)model.num_parameters(), (long long)T, (long long)B,
              (long long)tc.grad_accum, omp_get_max_threads(), par.describe().c_str());
  std::printf("data: %s, %s tokens, %zu train / %zu held-out\n", data.source.c_str(),
              tok.bytes ? "byte" : "BPE", data.train.size(), data.val.size());

  // Batches are gathered on a background thread, in (step, micro) order from start_step.
  const int64_t n_train = int64_t(data.train.size());
  int64_t next_step = start_step, next_micro = 0;
  Prefetcher<Batch> prefetch([&] {
    const uint64_t key =
        RngKey{cfg.run.seed, "lm.windows", "step " + std::to_string(next_step)}.hash();
    // This rank's windows are entries dp_rank * local_B.. of the micro-batch's B.
    std::vector<int64_t> starts(static_cast<size_t>(local_B));
    const int64_t first = next_micro * B + par.dp_rank() * local_B;
    for (int64_t b = 0; b < local_B; ++b)
      starts[size_t(b)] = window_start(key, first + b, n_train, T);
    if (++next_micro == tc.grad_accum) {
      next_micro = 0;
      ++next_step;
    }
    return gather_windows(data.train, starts, T);
  });

  // Collective: every rank writes its pieces.
  auto save = [&](int64_t step) {
    Json state = Json::object({{"model_kind", "gpt"},
                               {"run_id", cfg.run.id},
                               {"step", step},
                               {"optimizer_steps", opt.steps_taken()},
                               {"tokens_seen", step * B * T * tc.grad_accum},
                               {"seed", int64_t(cfg.run.seed)}});
    return par.save_checkpoint(run_dir, step, state, {}, tc.keep_checkpoints);
  };

  const std::vector<int64_t> periodic_windows =
      eval_window_starts(int64_t(data.val.size()), T, cfg.eval.windows);
  Progress progress(par.metrics_path(run_dir), tc.steps, "tok", B * T * tc.grad_accum,
                    /*append=*/start_step > 0);
  progress.set_time_budget(tc.max_minutes * 60);
  progress.count_data_wait([&] { return prefetch.waited_seconds(); });
  progress.count_flops(  // one step's work against the GEMM ceiling: the line's MFU
      train_step_flops(gpt_bench(cfg.run.name, cfg.gpt, B * tc.grad_accum, T)),
      measure_gemm_ceiling(tc.precision == "bf16" ? DType::BF16 : DType::F32, 1024),
      dist::world_size());
  StepGuard guard(cfg, par, run_dir);
  Profiler profiler(parse_profile_steps(cfg.run.profile_steps), run_dir, *dist::world());
  model.name_for_trace();
  const std::vector<int64_t> rows = par.sequence_rows(T);  // empty: whole sequences
  const MeanLoss mean_loss =
      par.pipeline() ? pipeline_loss(model, *par.pipeline(), rows) : whole_model_loss(model, rows);
  double train_seconds = 0;  // time in training steps (not evaluation or checkpoints)
  int64_t step = start_step;
  for (; step < tc.steps; ++step) {
    const auto step_begin = Clock::now();
    profiler.begin_step(step);
    guard.begin_step(step);
    AutocastGuard autocast(tc.precision == "bf16" ? DType::BF16 : DType::F32);
    double loss_sum = 0;
    if (const auto* pipe = par.pipeline()) {
      std::vector<Batch> batches;
      for (int64_t micro = 0; micro < tc.grad_accum; ++micro) batches.push_back(prefetch.next());
      parallel::PipelineStages stages = gpt_stages(model, *pipe, batches, rows);
      stages.loss = [&guard, step, loss = stages.loss](const Tensor& out, int64_t m) {
        return guard.guard_loss(loss(out, m), step);
      };
      loss_sum = par.run_pipeline_step(stages);
    }
    for (int64_t micro = 0; micro < tc.grad_accum && !par.pipeline(); ++micro) {
      Batch b = prefetch.next();
      const Shard shard = local_rows(b, rows);
      Tensor loss = model.loss(shard.ids, shard.targets, shard.positions);
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
    if (guard.accept(step, loss_sum, grad_norm)) {
      trace::Scope scope("optimizer_step", "optimizer");
      opt.step(lr);
      par.after_optimizer_step();
    }
    par.zero_grad();
    if (guard.needs_rollback()) guard.roll_back(step, opt, {});
    guard.end_step(step, prefetch.waited_seconds());
    profiler.end_step(step);
    train_seconds += seconds_since(step_begin);

    const bool last = step + 1 == tc.steps;
    Json extra = Json::object({{"grad_norm", grad_norm}, {"skipped_steps", guard.skipped()}});
    const bool eval_now = cfg.eval.every > 0 && (step + 1) % cfg.eval.every == 0;
    if (eval_now) {
      const auto t0 = Clock::now();
      AutocastGuard exact(DType::F32);  // held-out figures in full precision
      const LmEvalResult r =
          evaluate_over_dp(par, mean_loss, T, tok, data.val, periodic_windows, B);
      extra.set("val", eval_json(r));
      std::printf("eval   %6lld | held-out %s [%.1fs]\n", (long long)(step + 1),
                  eval_line(r).c_str(), seconds_since(t0));
    }
    if ((step + 1) % tc.log_every == 0 || last || step == start_step || eval_now)
      progress.log(step, loss_sum, lr, extra);
    const bool out_of_time = agreed[1] > 0;
    const bool preempted = guard.preempted();  // collective over the world
    const bool stop = out_of_time || preempted || (tc.stop_after > 0 && step + 1 == tc.stop_after);
    if ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last || stop) {
      guard.before_checkpoint(step);
      const std::string dir = save(step + 1);
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
  const int64_t steps_run = step - start_step;
  if (steps_run > 0)
    std::printf("trained %lld steps, %lld tokens in %.1fs of steps: %.0f tok/s\n",
                (long long)steps_run, (long long)(steps_run * B * T * tc.grad_accum), train_seconds,
                double(steps_run * B * T * tc.grad_accum) / train_seconds);

  // The final held-out loss, over the whole held-out split.
  const auto t0 = Clock::now();
  const LmEvalResult r = evaluate_over_dp(par, mean_loss, T, tok, data.val,
                                          eval_window_starts(int64_t(data.val.size()), T, 0), B);
  // The text sample runs on the main rank alone, on a full copy of the weights (collective).
  std::unique_ptr<models::Gpt> full_model;
  if (cfg.lm_sample.tokens > 0) {
    std::vector<Tensor> values;
    for (const auto& p : par.pieces()) values.push_back(p.value);
    const NamedTensors weights = par.gather_full(values);
    if (par.main()) {
      full_model = std::make_unique<models::Gpt>(cfg.gpt);
      load_state_dict(*full_model, as_map(weights), "the trained weights");
    }
  }
  if (!par.main()) return;  // the report, the file and the text sample: the main rank alone
  Json result = eval_json(r);
  result.set("step", Json(step));
  result.set("source", Json(data.source));
  result.set("train_seconds", Json(train_seconds));
  write_json_file(run_dir + "/eval.json", result);
  std::printf("final held-out loss at step %lld: %s [%.1fs] -> %s/eval.json\n", (long long)step,
              eval_line(r).c_str(), seconds_since(t0), run_dir.c_str());

  if (cfg.lm_sample.tokens > 0) {
    GptSampleOptions so{cfg.lm_sample.prompt, cfg.lm_sample.tokens, cfg.lm_sample.temperature,
                        cfg.run.seed};
    std::printf("sample (%lld tokens, temperature %.2f):\n%s\n", (long long)so.tokens,
                so.temperature, generate(*full_model, tok, so).c_str());
  }
}

LmEvalResult eval_gpt(const std::string& ckpt_dir, int64_t windows) {
  LoadedGpt g = load_gpt_checkpoint(ckpt_dir, "eval");
  const LmData data = load_lm_data(g.cfg, g.tok);
  const auto starts = eval_window_starts(int64_t(data.val.size()), g.cfg.gpt.context, windows);
  return evaluate(whole_model_loss(*g.model), g.model->config.context, g.tok, data.val, starts,
                  g.cfg.train.batch_size, 0);
}

std::string sample_gpt(const std::string& ckpt_dir, const GptSampleOptions& options) {
  LoadedGpt g = load_gpt_checkpoint(ckpt_dir, "sample");
  return generate(*g.model, g.tok, options);
}

}  // namespace loom::train
