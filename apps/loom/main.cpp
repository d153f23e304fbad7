// The `loom` command line: each command's options (CLI11), then the command itself.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "help.h"
#include "launch.h"
#include "loom/backend/cpu/threads.h"
#include "loom/bench/step_bench.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/core/allocator.h"
#include "loom/core/error.h"
#include "loom/core/json.h"
#include "loom/core/json_file.h"
#include "loom/data/bpe.h"
#include "loom/data/npy.h"
#include "loom/data/text.h"
#include "loom/data/token_prepare.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer_files.h"
#include "loom/dist/world.h"
#include "loom/ops/creation.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/config.h"
#include "loom/train/config_file.h"
#include "loom/train/config_keys.h"
#include "loom/train/dry_run.h"
#include "loom/train/hf_interop.h"
#include "loom/train/preemption.h"
#include "loom/train/recipes/dit.h"
#include "loom/train/recipes/dit_clusters.h"
#include "loom/train/recipes/dit_experts.h"
#include "loom/train/recipes/gpt.h"
#include "loom/train/report.h"
#include "loom/train/run_directory.h"
#include "loom/train/trainer.h"
#include "numbers.h"
#include "rank_log.h"

namespace {

constexpr const char* kCheckpointHelp = "a step-NNNNNN directory, or a run directory (its latest)";

// `--resume auto` is the one flag followed by a word of its own, and CLI11 would give an
// optional value whatever word follows (the config path, say). So --resume is a flag with the
// value `--resume=auto`, and the pair is joined here -- before a `--` only: what follows it is
// launch's command, passed on untouched.
void join_resume_auto(std::vector<std::string>& args) {
  for (size_t k = 0; k + 1 < args.size() && args[k] != "--"; ++k)
    if (args[k] == "--resume" && args[k + 1] == "auto") {
      args[k] = "--resume=auto";
      args.erase(args.begin() + ptrdiff_t(k + 1));
    }
}

// Parses args (the words after the program's name) into app's options.
void parse(CLI::App& app, std::vector<std::string> args) {
  join_resume_auto(args);
  std::reverse(args.begin(), args.end());  // CLI11 takes them as a stack
  app.parse(args);
}

// ---- train

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set and --profile, in the order given
  std::string resume;                  // "" (a fresh run), "latest" or "auto"
  bool overwrite = false;
  bool dry_run = false;
  int64_t processes = 0;  // --dry-run: the job's size (0: what the degrees set)
};

// --profile steps=A:B is the config key run.profile_steps.
std::string profile_override(const std::string& value) {
  if (value.rfind("steps=", 0) != 0)
    throw CLI::ValidationError("--profile",
                               "expects steps=A:B (e.g. --profile steps=5:7), got '" + value + "'");
  return "run.profile_steps=\"" + value.substr(6) + "\"";
}

// Used twice: for `loom train` and for the train command that `launch --max-restarts` supervises.
void add_train(CLI::App& cmd, TrainArgs& a) {
  cmd.description(
      "train a model (model.kind dit, gpt or vit_classifier); the run directory is "
      "<run.out_dir>/<run.name>, and a fresh run refuses one that holds a run; exit status 3: "
      "the run directory refused the run (nothing changed there)");
  cmd.add_option("CONFIG.toml", a.config, "the run's config")->required();
  // Both are config overrides, applied in the order given: each is added as it is read.
  cmd.add_option_function<std::string>(
         "--set", [&a](const std::string& kv) { a.overrides.push_back(kv); },
         "override one config key (repeatable)")
      ->type_name("section.key=value ...")
      ->trigger_on_parse();
  cmd.add_flag("--resume{latest}", a.resume,
               "continue from the run's `latest` checkpoint;\n"
               "--resume auto: from the newest one whose checksums all match")
      ->type_name("[auto]")
      ->check(CLI::IsMember({"latest", "auto"}).description(""));
  cmd.add_flag("--overwrite", a.overwrite, "move a run already in the directory aside, start anew");
  CLI::Option* dry_run =
      cmd.add_flag("--dry-run", a.dry_run,
                   "print the resolved config, the layout and each rank's memory, then exit");
  cmd.add_option("--processes", a.processes,
                 "--dry-run: the processes of the job (default: the product of the degrees)")
      ->type_name("N")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->needs(dry_run);
  cmd.add_option_function<std::string>(
         "--profile", [&a](const std::string& v) { a.overrides.push_back(profile_override(v)); },
         "Chrome traces of steps A..B in <run dir>/trace/")
      ->type_name("steps=A:B")
      ->trigger_on_parse();
}

loom::train::Resume resume_of(const std::string& word) {
  if (word == "auto") return loom::train::Resume::Auto;
  return word == "latest" ? loom::train::Resume::Latest : loom::train::Resume::No;
}

int train_command(const std::string& config_path, std::vector<std::string> overrides,
                  loom::train::Resume resume, bool overwrite) {
  loom::train::Config config = loom::train::load_config(config_path, overrides);
  loom::cpu::use_threads(config.run.threads);
  loom::train::arm_preemption(loom::train::parse_signal_names(config.resilience.preempt_signals));
  loom::dist::init_world({config.parallel.timeout_s});
  loom::train::check_fits_in_memory(config, loom::dist::world_size());
  // run.memory_limit_mb holds from the start: the model build is inside it too.
  loom::host_allocator().set_limit(int64_t(config.run.memory_limit_mb * 1024 * 1024));
  // The run directory first: its lock, and whether this is its own run starting or resuming.
  const loom::train::RunDirectory run =
      loom::train::RunDirectory::open(config.run_dir(), config.run.id, config.resolved_toml, resume,
                                      overwrite, *loom::dist::world());
  if (config.run.id != run.id()) {  // recorded in config.toml and the checkpoints
    overrides.push_back("run.id=\"" + run.id() + "\"");
    config = loom::train::load_config(config_path, overrides);
  }
  loom::cli::start_rank_logs(config.run_dir());
  loom::train::train(config, run.resume_from());
  return 0;
}

// ---- sample: the flags of both model kinds, each kind's in its group; the checkpoint's kind
// decides which apply.

constexpr const char* kDitFlags = "DiT checkpoints";
constexpr const char* kGptFlags = "GPT checkpoints";

// Decentralized experts: a dit_router checkpoint with --experts samples (and evaluates) the
// experts' mixture as one model.
struct ExpertArgs {
  std::vector<std::string> experts;
  std::string routing = "full";
};

void add_experts(CLI::App& cmd, ExpertArgs& a) {
  cmd.add_option("--experts", a.experts, "with a dit_router checkpoint: its experts' checkpoints")
      ->delimiter(',')
      ->type_name("DIR,DIR,...");
  cmd.add_option("--routing", a.routing, "the experts' mixture")
      ->check(CLI::IsMember({"full", "top1", "top2"}).description(""))
      ->type_name("full|top1|top2");
}

// The experts of a router checkpoint, or a usage error when the flags and the kind disagree.
// Each expert may be named by its run directory (its latest checkpoint) too.
std::unique_ptr<loom::train::Experts> experts_of(const std::string& ckpt, const std::string& kind,
                                                 ExpertArgs& a) {
  if (kind != "dit_router") {
    if (!a.experts.empty())
      throw CLI::ValidationError("--experts", "needs a dit_router checkpoint, and " + ckpt +
                                                  " holds a " + kind + " model");
    return nullptr;
  }
  if (a.experts.empty())
    throw CLI::ValidationError("--experts", ckpt + " holds a router: name its experts");
  for (std::string& e : a.experts) e = loom::checkpoint_from_user_path(e);
  return std::make_unique<loom::train::Experts>(loom::train::load_experts(ckpt, a.experts));
}

struct SampleArgs {
  std::string checkpoint;
  int64_t seed = 0;
  ExpertArgs experts;
  loom::train::DitSampleOptions dit;
  loom::train::GptSampleOptions gpt;
};

void add_sample(CLI::App& cmd, SampleArgs& a) {
  cmd.description(
      "DiT checkpoint: sample it (EMA weights) into a PNG grid and/or .npy files; GPT "
      "checkpoint: continue a prompt (temperature 0: greedy)");
  cmd.add_option("CHECKPOINT_DIR", a.checkpoint, kCheckpointHelp)->required();
  add_int(cmd, "--seed", a.seed, "sampling seed", std::numeric_limits<int64_t>::min(),
          std::numeric_limits<int64_t>::max());
  cmd.option_defaults()->group(kDitFlags);
  add_int(cmd, "--per-class", a.dit.per_class, "samples per class");
  add_int(cmd, "--class", a.dit.only_class, "sample this class alone (one row; -1: every class)",
          -1);
  add_int(cmd, "--steps", a.dit.steps, "sampler steps");
  add_number(cmd, "--cfg", a.dit.cfg_scale, "classifier-free guidance scale");
  cmd.add_flag("--heun", a.dit.heun, "Heun's sampler (second order)");
  add_experts(cmd, a.experts);
  a.dit.png_path = "samples.png";
  cmd.add_option("--png", a.dit.png_path, "the grid, one row per class")->type_name("PATH");
  cmd.add_option("--npy", a.dit.npy_prefix, "write PREFIX_images.npy and PREFIX_labels.npy")
      ->type_name("PREFIX");
  cmd.option_defaults()->group(kGptFlags);
  cmd.add_option("--prompt", a.gpt.prompt, "the text to continue")->type_name("TEXT");
  add_int(cmd, "--tokens", a.gpt.tokens, "tokens to add");
  add_number(cmd, "--temperature", a.gpt.temperature, "0: greedy")->type_name("T");
  cmd.add_option("--logits", a.gpt.logits_npy, "also write the prompt's logits (T, vocab) as .npy")
      ->type_name("FILE");
}

// Fails naming the flags of `group` that were given: they are not for this checkpoint's kind.
void reject_flags(const CLI::App& cmd, const std::string& group, const std::string& ckpt,
                  const std::string& kind) {
  std::string given;
  for (const CLI::Option* o : cmd.get_options())
    if (o->get_group() == group && o->count() > 0)
      given += (given.empty() ? "" : ", ") + o->get_name();
  if (!given.empty())
    throw CLI::ValidationError(
        given, "only for " + group + ", and " + ckpt + " holds a " + kind + " model");
}

int sample_command(const CLI::App& cmd, SampleArgs a) {
  const std::string ckpt = loom::checkpoint_from_user_path(a.checkpoint);
  if (cmd.get_option("--png")->count() > 0) loom::train::check_output_path(a.dit.png_path, "--png");
  if (!a.dit.npy_prefix.empty())
    for (const char* part : {"_images.npy", "_labels.npy"})
      loom::train::check_output_path(a.dit.npy_prefix + part, "--npy");
  if (!a.gpt.logits_npy.empty()) loom::train::check_output_path(a.gpt.logits_npy, "--logits");
  const std::string kind = loom::train::checkpoint_model_kind(ckpt);
  if (kind == "gpt") {
    reject_flags(cmd, kDitFlags, ckpt, kind);
    a.gpt.seed = uint64_t(a.seed);
    const std::string text = loom::train::sample_gpt(ckpt, a.gpt);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return 0;
  }
  reject_flags(cmd, kGptFlags, ckpt, kind);
  a.dit.seed = uint64_t(a.seed);
  if (const auto experts = experts_of(ckpt, kind, a.experts)) {
    loom::train::write_samples(
        loom::train::mixture_velocity(*experts, loom::train::routing_from_name(a.experts.routing)),
        experts->dit, a.dit);
    return 0;
  }
  loom::train::sample_dit(ckpt, a.dit);
  return 0;
}

// ---- eval

struct EvalArgs {
  std::string checkpoint;
  int64_t windows = 0, samples = 1000, steps = 0;
  double cfg_scale = -1;
  std::string sampler;    // "" (the run's [sample] heun), "euler" or "heun"
  std::string precision;  // "" (the run's train.precision), "f32" or "bf16"
  std::string classifier = "assets/fmnist_classifier";
  std::string out;  // "": <run directory>/eval-step-NNNNNN.json
  ExpertArgs experts;
};

void add_eval(CLI::App& cmd, EvalArgs& a) {
  cmd.description(
      "GPT: held-out loss (nats/token, nats/byte, bits/byte) over the whole held-out text, or N "
      "evenly spread windows of it; DiT: class accuracy and FID of N samples against the "
      "classifier's features (docs/evaluation.md)");
  cmd.add_option("CHECKPOINT_DIR", a.checkpoint, kCheckpointHelp)->required();
  cmd.add_option("--out", a.out,
                 "the figures as JSON (default: eval-step-NNNNNN.json in the run directory)")
      ->type_name("FILE");
  add_int(cmd, "--windows", a.windows, "held-out windows (0: all the text)", 0)->group(kGptFlags);
  cmd.option_defaults()->group(kDitFlags);
  add_int(cmd, "--samples", a.samples, "samples");
  add_int(cmd, "--steps", a.steps, "sampler steps (0: the run's [sample] steps)");
  add_number(cmd, "--cfg", a.cfg_scale, "guidance scale (negative: the run's [sample] cfg_scale)");
  cmd.add_option("--sampler", a.sampler, "euler or heun (default: the run's [sample] heun)")
      ->type_name("euler|heun")
      ->check(CLI::IsMember({"euler", "heun"}).description(""));
  cmd.add_option("--precision", a.precision,
                 "the sampler's autocast (default: the run's train.precision)")
      ->type_name("f32|bf16")
      ->check(CLI::IsMember({"f32", "bf16"}).description(""));
  cmd.add_option("--classifier", a.classifier, "the classifier's run directory")->type_name("DIR");
  add_experts(cmd, a.experts);
}

int eval_command(EvalArgs a) {
  const std::string ckpt = loom::checkpoint_from_user_path(a.checkpoint);
  const std::string kind = loom::train::checkpoint_model_kind(ckpt);
  // By default eval-step-NNNNNN.json in the run directory: beside the run's own eval.json
  // (never replacing it), not inside the checkpoint; a later evaluation of the same checkpoint
  // replaces it.
  const std::filesystem::path ckpt_path(ckpt);
  const std::string out =
      !a.out.empty()
          ? a.out
          : (ckpt_path.parent_path() / ("eval-" + ckpt_path.filename().string() + ".json"))
                .string();
  if (!a.out.empty()) loom::train::check_output_path(out, "--out");
  if (const auto experts = experts_of(ckpt, kind, a.experts)) {
    // The experts' mixture, with the first expert's [sample] settings by default.
    const loom::train::Config cfg = loom::train::load_config(
        (std::filesystem::path(a.experts.experts[0]).parent_path() / "config.toml").string());
    loom::train::DitSampleOptions o;
    o.steps = a.steps > 0 ? a.steps : cfg.sample.steps;
    o.cfg_scale = a.cfg_scale >= 0 ? a.cfg_scale : cfg.sample.cfg_scale;
    o.heun = a.sampler.empty() ? cfg.sample.heun : a.sampler == "heun";
    o.precision = a.precision.empty() ? cfg.train.precision : loom::dtype_from_name(a.precision);
    o.seed = cfg.run.seed;
    const auto routing = loom::train::routing_from_name(a.experts.routing);
    const auto q =
        loom::train::evaluate_dit(loom::train::mixture_velocity(*experts, routing), experts->dit,
                                  a.classifier, cfg.data.path, a.samples, o);
    loom::Json result = loom::train::quality_json(q, o);
    result.set("checkpoint", ckpt);
    result.set("experts", int64_t(experts->experts.size()));
    result.set("routing", a.experts.routing);
    loom::write_json_file(out, result);
    std::printf(
        "%s + %zu experts, %s routing: class accuracy %.2f%% of %lld samples, FID %.3f, "
        "real-data floor %.3f (ratio %.2f), cfg %.2f, %lld %s steps -> %s\n",
        ckpt.c_str(), experts->experts.size(), a.experts.routing.c_str(), 100.0 * q.class_accuracy,
        (long long)q.samples, q.fid, q.fid_floor, q.fid / q.fid_floor, o.cfg_scale,
        (long long)o.steps, o.heun ? "Heun" : "Euler", out.c_str());
    return 0;
  }
  if (kind == "dit") {
    // Sampler settings default to the run's own [sample] section.
    const loom::train::Config cfg = loom::train::load_config(
        (std::filesystem::path(ckpt).parent_path() / "config.toml").string());
    loom::train::DitSampleOptions o;
    o.steps = a.steps > 0 ? a.steps : cfg.sample.steps;
    o.cfg_scale = a.cfg_scale >= 0 ? a.cfg_scale : cfg.sample.cfg_scale;
    o.heun = a.sampler.empty() ? cfg.sample.heun : a.sampler == "heun";
    o.precision = a.precision.empty() ? cfg.train.precision : loom::dtype_from_name(a.precision);
    o.seed = cfg.run.seed;
    const auto q = loom::train::evaluate_dit_checkpoint(ckpt, a.classifier, a.samples, o, out);
    std::printf(
        "%s: class accuracy %.2f%% of %lld samples, FID %.3f, real-data floor %.3f "
        "(ratio %.2f), cfg %.2f, %lld %s steps -> %s\n",
        ckpt.c_str(), 100.0 * q.class_accuracy, (long long)q.samples, q.fid, q.fid_floor,
        q.fid / q.fid_floor, o.cfg_scale, (long long)o.steps, o.heun ? "Heun" : "Euler",
        out.c_str());
    return 0;
  }
  LOOM_CHECK(kind == "gpt") << "eval: " << ckpt << " holds a checkpoint of model kind '" << kind
                            << "', which loom eval does not know";
  const loom::train::LmEvalResult r = loom::train::eval_gpt(ckpt, a.windows);
  std::printf(
      "held-out loss of %s: %.4f nats/token, %.4f nats/byte, %.4f bits/byte "
      "(%lld windows, %lld tokens, %lld bytes) -> %s\n",
      ckpt.c_str(), r.nats_per_token(), r.nats_per_byte(), r.bits_per_byte(), (long long)r.windows,
      (long long)r.tokens, (long long)r.bytes, out.c_str());
  loom::write_json_file(out, loom::Json::object({{"checkpoint", ckpt},
                                                 {"windows", r.windows},
                                                 {"tokens", r.tokens},
                                                 {"bytes", r.bytes},
                                                 {"nats_per_token", r.nats_per_token()},
                                                 {"nats_per_byte", r.nats_per_byte()},
                                                 {"bits_per_byte", r.bits_per_byte()}}));
  return 0;
}

// ---- cluster

void add_cluster(CLI::App& cmd, loom::train::ClusterOptions& o) {
  cmd.description(
      "split the Fashion-MNIST training set into K clusters (k-means on the classifier's "
      "features) for decentralized experts: each trains on one (data.clusters, data.cluster); "
      "writes the assignments and OUT_centroids.npy");
  add_int(cmd, "--k", o.k, "clusters", 1);
  cmd.add_option("--out", o.out, "the assignments, an .npy file")->required()->type_name("FILE");
  cmd.add_option("--classifier", o.classifier, "the classifier's run directory")->type_name("DIR");
  cmd.add_option("--data", o.data_path, "the Fashion-MNIST directory")->type_name("DIR");
  add_int(cmd, "--images", o.images, "only the first N training images (0: all)", 0);
  add_int(cmd, "--seed", o.seed, "k-means seed", 0);
}

// ---- tokenizer train, tokenizer check

struct TokenizerTrainArgs {
  std::string input, out, cache_dir;
  bool kjv = false;
  int64_t vocab = 0;
};

void add_tokenizer_train(CLI::App& cmd, TokenizerTrainArgs& a) {
  cmd.description(
      "learn a byte-level BPE tokenizer with N tokens (--input FILE or --kjv) and save it");
  cmd.add_option("--input", a.input, "the text to learn from")->type_name("FILE");
  cmd.add_flag("--kjv", a.kjv, "learn from the King James Bible (Debian's bible-kjv)");
  cmd.add_option("--cache-dir", a.cache_dir, "where --kjv keeps kjv.txt")->type_name("DIR");
  add_int(cmd, "--vocab", a.vocab, "tokens, the 256 bytes included")->required();
  cmd.add_option("--out", a.out, "the tokenizer file to write")->required()->type_name("PATH");
}

int tokenizer_train_command(TokenizerTrainArgs a) {
  LOOM_CHECK(a.kjv != !a.input.empty())
      << "tokenizer train: give exactly one of --input FILE and --kjv";
  loom::train::check_output_path(a.out, "tokenizer train --out");
  LOOM_CHECK(a.vocab >= loom::BpeTokenizer::kByteTokens && a.vocab <= (int64_t(1) << 24))
      << "tokenizer train: --vocab " << a.vocab << " must be at least "
      << loom::BpeTokenizer::kByteTokens << " (the byte tokens)";
  if (a.kjv)
    a.input =
        loom::kjv_corpus(a.cache_dir.empty() ? loom::train::default_cache_dir(".") : a.cache_dir);
  const std::string text = loom::read_text_file(a.input);
  const loom::BpeTokenizer tok = loom::BpeTokenizer::train(text, int(a.vocab));
  tok.save(a.out);
  const size_t tokens = tok.encode(text).size();
  std::printf(
      "tokenizer: %d tokens (%zu merges) learned from %s (%zu bytes) -> %s\n"
      "%s encodes to %zu tokens, %.3f bytes/token; set model.vocab_size = %d\n",
      tok.vocab_size(), tok.merges().size(), a.input.c_str(), text.size(), a.out.c_str(),
      a.input.c_str(), tokens, double(text.size()) / double(std::max<size_t>(tokens, 1)),
      tok.vocab_size());
  return 0;
}

struct TokenizerCheckArgs {
  std::string path, pattern = "gpt2", input, ids;
};

void add_tokenizer_spec(CLI::App& cmd, std::string& path, std::string& pattern) {
  cmd.add_option("--tokenizer", path,
                 "a Loom BPE file, a tokenizer.json, a directory with tokenizer.json or "
                 "vocab.json + merges.txt, or a .tiktoken file")
      ->required()
      ->type_name("PATH");
  cmd.add_option("--pattern", pattern, "a .tiktoken file's pre-tokenisation: gpt2, cl100k, o200k")
      ->capture_default_str();
}

void add_tokenizer_check(CLI::App& cmd, TokenizerCheckArgs& a) {
  cmd.description("encode FILE, decode it again and compare (round trip)");
  add_tokenizer_spec(cmd, a.path, a.pattern);
  cmd.add_option("--input", a.input, "the text to encode")->required()->type_name("FILE");
  cmd.add_option("--ids", a.ids, "also write the token ids as .npy (int64)")->type_name("FILE");
}

int tokenizer_check_command(const TokenizerCheckArgs& a) {
  const loom::BpeTokenizer tok = loom::read_tokenizer(a.path, a.pattern).bpe;
  const std::string text = loom::read_text_file(a.input);
  const std::vector<int32_t> ids = tok.encode(text);
  LOOM_CHECK(tok.decode(ids) == text) << "tokenizer check: decode(encode(" << a.input
                                      << ")) differs from the file (" << a.path << ")";
  if (!a.ids.empty())
    loom::write_npy(a.ids, loom::from_vector(std::vector<int64_t>(ids.begin(), ids.end()),
                                             {int64_t(ids.size())}));
  std::printf(
      "round trip ok: %s (%zu bytes) -> %zu tokens of %s (%d tokens) -> the same bytes "
      "(%.3f bytes/token)\n",
      a.input.c_str(), text.size(), ids.size(), a.path.c_str(), tok.vocab_size(),
      double(text.size()) / double(std::max<size_t>(ids.size(), 1)));
  return 0;
}

struct TokenizerConvertArgs {
  std::string path, pattern = "gpt2", out;
};

void add_tokenizer_convert(CLI::App& cmd, TokenizerConvertArgs& a) {
  cmd.description("write a tokenizer as a Hugging Face tokenizer.json");
  add_tokenizer_spec(cmd, a.path, a.pattern);
  cmd.add_option("--out", a.out, "the tokenizer.json to write")->required()->type_name("FILE");
}

int tokenizer_convert_command(const TokenizerConvertArgs& a) {
  loom::train::check_output_path(a.out, "tokenizer convert --out");
  const loom::BpeTokenizer tok = loom::read_tokenizer(a.path, a.pattern).bpe;
  loom::write_tokenizer_json(tok, a.out);
  std::printf("tokenizer: %d tokens of %s -> %s\n", tok.vocab_size(), a.path.c_str(),
              a.out.c_str());
  return 0;
}

// ---- report

struct ReportArgs {
  std::string run, out;
};

void add_report(CLI::App& cmd, ReportArgs& a) {
  cmd.description(
      "write a run's report: one self-contained HTML page with its curves, memory, "
      "step-time split, evaluation, sample grids and events");
  cmd.add_option("run", a.run, "the run directory")->required()->type_name("RUN");
  cmd.add_option("--out", a.out, "the HTML file (default RUN/report.html)")->type_name("FILE");
}

struct ConfigKeysArgs {
  std::string section;
  bool markdown = false;
};

void add_config_keys(CLI::App& cmd, ConfigKeysArgs& a) {
  cmd.description("list every config key: its type, default, allowed values and meaning");
  cmd.add_option("section", a.section, "only this section (run, model, train, optim, ...)")
      ->type_name("SECTION");
  cmd.add_flag("--markdown", a.markdown, "as docs/config.md (the whole reference)");
}

int config_keys_command(const ConfigKeysArgs& a) {
  if (a.markdown) return std::fputs(loom::train::config_keys_markdown().c_str(), stdout), 0;
  const std::string text = loom::train::config_keys_text(a.section);
  if (text.empty()) {
    std::vector<std::string> sections;
    for (const std::string& name : loom::train::config_key_names())
      if (const std::string s = name.substr(0, name.find('.'));
          std::find(sections.begin(), sections.end(), s) == sections.end())
        sections.push_back(s);
    std::string known, near = loom::train::closest_word(a.section, sections);
    for (const std::string& s : sections) known += (known.empty() ? "" : ", ") + s;
    std::fprintf(stderr, "loom config keys: no section [%s]%s (sections: %s)\n",
                 a.section.c_str(), near.empty() ? "" : (" (did you mean " + near + "?)").c_str(),
                 known.c_str());
    return 2;
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

int report_command(const ReportArgs& a) {
  const loom::train::ReportSummary r = loom::train::write_report(a.run, a.out);
  std::printf("report: %s (%d plots, %d images, %d events)\n", r.path.c_str(), r.plots, r.images,
              r.events);
  return 0;
}

// ---- data prepare

struct DataPrepareArgs {
  std::vector<std::string> inputs;
  std::string tokenizer = "bytes", pattern = "gpt2", out, cache_dir;
  bool kjv = false;
  double val_fraction = 0.05;
  double chunk_mb = 64;
};

void add_data_prepare(CLI::App& cmd, DataPrepareArgs& a) {
  cmd.description(
      "tokenize text once into token files (train.bin, val.bin) that data.dataset = \"tokens\" "
      "trains from");
  cmd.add_option("--input", a.inputs, "text files, each a document")->type_name("FILE...");
  cmd.add_flag("--kjv", a.kjv, "the King James Bible (Debian's bible-kjv)");
  cmd.add_option("--cache-dir", a.cache_dir, "where --kjv keeps kjv.txt")->type_name("DIR");
  cmd.add_option("--tokenizer", a.tokenizer,
                 "bytes, a Loom BPE file, a tokenizer.json, a .tiktoken file or a directory "
                 "with one");
  cmd.add_option("--pattern", a.pattern,
                 "a .tiktoken file's pre-tokenisation: gpt2, cl100k, o200k");
  add_number(cmd, "--val-fraction", a.val_fraction, "each document's held-out tail", true);
  add_number(cmd, "--chunk-mb", a.chunk_mb, "text tokenized at a time, in MB", true);
  cmd.add_option("--out", a.out, "the directory to create")->required()->type_name("DIR");
}

int data_prepare_command(DataPrepareArgs a) {
  LOOM_CHECK(a.kjv != !a.inputs.empty()) << "data prepare: give --input FILE... or --kjv";
  loom::train::check_output_path(a.out, "data prepare --out");
  if (a.kjv)
    a.inputs = {
        loom::kjv_corpus(a.cache_dir.empty() ? loom::train::default_cache_dir(".") : a.cache_dir)};
  const loom::Tokenizer tok = loom::read_tokenizer(a.tokenizer, a.pattern);
  const auto t0 = std::chrono::steady_clock::now();
  const loom::PreparedTokens r = loom::prepare_tokens(a.inputs, tok, a.tokenizer, a.val_fraction,
                                                      a.out, size_t(a.chunk_mb * 1e6));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string keys = "data.dataset = \"tokens\", data.path = \"" + a.out +
                     "\", data.tokenizer = \"" + (tok.bytes ? std::string("bytes") : a.out) + "\"";
  if (!tok.bytes && tok.files[0].size() > 9 &&
      tok.files[0].compare(tok.files[0].size() - 9, 9, ".tiktoken") == 0)
    keys += ", data.tokenizer_pattern = \"" + a.pattern + "\"";
  std::printf(
      "data: %lld document%s, %lld bytes -> %lld train + %lld held-out tokens of %s (%d tokens) "
      "in %s [%.1fs, %.1f MB/s]\nset %s, model.vocab_size = %d\n",
      (long long)r.documents, r.documents == 1 ? "" : "s", (long long)r.bytes,
      (long long)r.train_tokens, (long long)r.val_tokens, a.tokenizer.c_str(), tok.bpe.vocab_size(),
      a.out.c_str(), s, double(r.bytes) / 1e6 / std::max(s, 1e-9), keys.c_str(),
      tok.bpe.vocab_size());
  return 0;
}

// ---- ckpt export, ckpt verify

struct CkptExportArgs {
  std::string checkpoint, out, part = "model", format = "safetensors", dtype = "f32";
  double shard_mb = 5000;
};

void add_ckpt_export(CLI::App& cmd, CkptExportArgs& a) {
  cmd.description(
      "write one part of a (sharded) checkpoint as one consolidated file; --format hf: a GPT "
      "checkpoint as a Hugging Face model directory (model.safetensors and config.json for "
      "GPT2LMHeadModel or LlamaForCausalLM)");
  cmd.add_option("CHECKPOINT_DIR", a.checkpoint, kCheckpointHelp)->required();
  cmd.add_option("OUT", a.out, "the file to write (--format hf: the directory)")->required();
  cmd.add_option("--part", a.part, "the part to write")->type_name("model|ema|optimizer");
  cmd.add_option("--format", a.format, "the output's format")
      ->check(CLI::IsMember({"safetensors", "hf"}).description(""))
      ->type_name("safetensors|hf");
  cmd.add_option("--dtype", a.dtype, "--format hf: the tensors' dtype")
      ->check(CLI::IsMember({"f32", "bf16"}).description(""))
      ->type_name("f32|bf16");
  add_number(cmd, "--shard-mb", a.shard_mb, "--format hf: the largest file, in MB", true);
}

int ckpt_export_command(const CLI::App& cmd, CkptExportArgs a) {
  a.checkpoint = loom::checkpoint_from_user_path(a.checkpoint);
  loom::train::check_output_path(a.out, "ckpt export");
  if (a.format == "hf") {
    if (cmd.get_option("--part")->count() > 0)
      throw CLI::ValidationError("--part", "--format hf writes the model");
    const loom::train::HfExport e = loom::train::export_hf(
        a.checkpoint, a.out, loom::dtype_from_name(a.dtype), int64_t(a.shard_mb * 1e6));
    std::printf(
        "%s: %s, %lld tensors, %lld bytes (%s) in %lld file%s, config.json and "
        "tokenizer.json\n",
        a.out.c_str(), e.architecture.c_str(), (long long)e.tensors, (long long)e.bytes,
        a.dtype.c_str(), (long long)e.shards, e.shards > 1 ? "s (and an index)" : "");
    return 0;
  }
  for (const char* flag : {"--dtype", "--shard-mb"})
    if (cmd.get_option(flag)->count() > 0)
      throw CLI::ValidationError(flag, "goes with --format hf");
  const loom::CheckpointReader ckpt(a.checkpoint);
  const auto tensors = ckpt.read_all(a.part);
  LOOM_CHECK(!tensors.empty()) << "ckpt export: " << a.checkpoint << " has no tensors under '"
                               << a.part << "/'";
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += int64_t(t.nbytes());
  loom::save_safetensors(a.out, tensors, {{"loom_checkpoint", a.checkpoint}, {"part", a.part}});
  std::printf("%s: %zu tensors, %lld bytes (%s of %s)\n", a.out.c_str(), tensors.size(),
              (long long)bytes, a.part.c_str(), a.checkpoint.c_str());
  return 0;
}

void add_ckpt_verify(CLI::App& cmd, std::string& checkpoint) {
  cmd.description(
      "check a checkpoint as resuming would: manifest and its checksum, every tensor the run's "
      "model needs in its shape, every piece against its checksum");
  cmd.add_option("CHECKPOINT_DIR", checkpoint, kCheckpointHelp)->required();
}

int ckpt_verify_command(const std::string& checkpoint) {
  const std::string dir = loom::checkpoint_from_user_path(checkpoint);
  // Exactly what resuming checks: the manifest and its checksum, trainer_state.json, every
  // tensor the run's model needs in its shape, and every piece against its checksum.
  loom::train::verify_checkpoint(dir);
  std::printf("%s: %zu tensors, every checksum matches and resume has all it needs\n", dir.c_str(),
              loom::CheckpointReader(dir).names("").size());
  return 0;
}

// ---- launch

void add_launch(CLI::App& cmd, loom::cli::LaunchOptions& o) {
  cmd.description(
      "run `loom COMMAND ARGS...` as N processes through mpirun (e.g. -- train cfg.toml); "
      "`mpirun -np N loom train cfg.toml` works as well; with --max-restarts R a failed train "
      "job restarts with --resume auto; with --hang-timeout S a job no rank of which began a "
      "step for S seconds is ended and restarted (start-up excepted: it is bounded by "
      "--startup-timeout, default 600 s)");
  // From COMMAND's first word on, every word is COMMAND's (its flags too).
  cmd.positionals_at_end();
  add_int(cmd, "-n,--np", o.processes, "processes", 1)->required()->default_str("");
  cmd.add_option("--hostfile", o.hostfile, "OpenMPI's hostfile: where to run")->type_name("FILE");
  add_int(cmd, "--max-restarts", o.max_restarts, "restarts of a failed train job", 0)
      ->type_name("R");
  add_number(cmd, "--hang-timeout", o.hang_timeout_s, "end a job with no step begun for S s", true)
      ->default_str("");
  add_number(cmd, "--startup-timeout", o.startup_timeout_s, "bound on start-up (default 600 s)",
             true)
      ->default_str("");
  cmd.add_option("COMMAND", o.command, "the loom command each process runs")->required();
}

// The run directory of the train command that `launch --max-restarts` supervises (its
// events.jsonl, the ranks' heartbeats), its words read as `loom train` reads them.
std::string supervised_run_dir(const std::vector<std::string>& command) {
  if (command.empty() || command[0] != "train")
    throw CLI::ValidationError("--max-restarts", "supervises `train` runs only");
  CLI::App train;
  TrainArgs a;
  add_train(train, a);
  try {
    parse(train, {command.begin() + 1, command.end()});
  } catch (const CLI::ParseError& e) {
    throw CLI::ValidationError("the train command", e.what());
  }
  return loom::train::load_config(a.config, a.overrides).run_dir();
}

int launch_command(const loom::cli::LaunchOptions& o) {
  // Both watches are the supervisor's: without restarts there is none.
  if (o.max_restarts == 0 && o.hang_timeout_s > 0)
    throw CLI::ValidationError("--hang-timeout", "needs --max-restarts");
  if (o.max_restarts == 0 && o.startup_timeout_s >= 0)
    throw CLI::ValidationError("--startup-timeout", "needs --max-restarts");
  loom::cli::check_placement(o);
  return loom::cli::launch(o, o.max_restarts > 0 ? supervised_run_dir(o.command) : "");
}

// ---- bench

struct BenchArgs {
  std::vector<std::string> names = {"all"};
  std::string json_path;
  loom::bench::BenchOptions options;
};

void add_bench(CLI::App& cmd, BenchArgs& a) {
  cmd.description(
      "time training steps of the standard models (gpt2_124m, gpt_small, dit_small; default "
      "all): ms/step, tokens or images/s, GFLOP/s and MFU against a GEMM ceiling measured first "
      "(docs/performance.md); --trace: a Chrome trace of one more step after the timed ones (one "
      "config)");
  cmd.add_option("CONFIG", a.names, "standard configs, or all (the default)");
  cmd.add_option("--precision", a.options.precision,
                 "the training steps' precision; a low-precision recipe emulates its GEMMs")
      ->check(CLI::IsMember({"f32", "bf16", "fp8_tensorwise", "fp8_delayed", "fp8_blockwise",
                             "mxfp8", "nvfp4"})
                  .description(""))
      ->type_name("f32|bf16|RECIPE");
  cmd.add_option_function<std::string>(
         "--device",
         [&a](const std::string& d) {
           a.options.device =
               d == "cuda" ? loom::Device{loom::DeviceType::CUDA, 0} : loom::cpu_device();
         },
         "where the steps run (the data is made on the host and moved)")
      ->check(CLI::IsMember({"cpu", "cuda"}).description(""))
      ->type_name("cpu|cuda");
  add_int(cmd, "--warmup", a.options.warmup, "untimed steps first");
  add_int(cmd, "--steps", a.options.steps, "timed steps");
  cmd.add_option("--json", a.json_path, "also write one JSON line per config")->type_name("FILE");
  cmd.add_option("--trace", a.options.trace_path, "the Chrome trace")->type_name("FILE");
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App loom{"", "loom"};
  loom.formatter(
      std::make_shared<loom::cli::Help>());  // the subcommands added from here on share both
  loom.option_defaults()->always_capture_default();
  loom.require_subcommand(1);
  TrainArgs train;
  SampleArgs sample;
  EvalArgs eval;
  TokenizerTrainArgs tokenizer_train;
  TokenizerCheckArgs tokenizer_check;
  TokenizerConvertArgs tokenizer_convert;
  DataPrepareArgs data_prepare;
  ReportArgs report;
  ConfigKeysArgs config_keys;
  CkptExportArgs ckpt_export;
  std::string ckpt_verify;
  loom::cli::LaunchOptions launch;
  BenchArgs bench;
  loom::train::ClusterOptions cluster;
  add_train(*loom.add_subcommand("train"), train);
  add_sample(*loom.add_subcommand("sample"), sample);
  add_eval(*loom.add_subcommand("eval"), eval);
  add_cluster(*loom.add_subcommand("cluster"), cluster);
  CLI::App* tokenizer = loom.add_subcommand("tokenizer")->require_subcommand(1);
  add_tokenizer_train(*tokenizer->add_subcommand("train"), tokenizer_train);
  add_tokenizer_check(*tokenizer->add_subcommand("check"), tokenizer_check);
  add_tokenizer_convert(*tokenizer->add_subcommand("convert"), tokenizer_convert);
  add_report(*loom.add_subcommand("report"), report);
  CLI::App* config = loom.add_subcommand("config")->require_subcommand(1);
  add_config_keys(*config->add_subcommand("keys"), config_keys);
  CLI::App* data = loom.add_subcommand("data")->require_subcommand(1);
  add_data_prepare(*data->add_subcommand("prepare"), data_prepare);
  CLI::App* ckpt = loom.add_subcommand("ckpt")->require_subcommand(1);
  add_ckpt_export(*ckpt->add_subcommand("export"), ckpt_export);
  add_ckpt_verify(*ckpt->add_subcommand("verify"), ckpt_verify);
  add_launch(*loom.add_subcommand("launch"), launch);
  add_bench(*loom.add_subcommand("bench"), bench);
  loom.add_subcommand("version", "print Loom's version");
  loom.add_subcommand("help")->group("");  // `loom help`: as `loom --help`; not listed
  try {
    parse(loom, {argv + 1, argv + argc});
    if (loom.got_subcommand("train") && train.dry_run)
      return std::fputs(
                 loom::train::dry_run_report(train.config, train.overrides, train.processes)
                     .c_str(),
                 stdout),
             0;
    if (loom.got_subcommand("train"))
      return train_command(train.config, train.overrides, resume_of(train.resume), train.overwrite);
    if (loom.got_subcommand("sample"))
      return sample_command(*loom.get_subcommand("sample"), sample);
    if (loom.got_subcommand("eval")) return eval_command(eval);
    if (loom.got_subcommand("cluster")) {
      loom::train::check_output_path(cluster.out, "cluster --out");
      return loom::train::cluster_training_set(cluster), 0;
    }
    if (tokenizer->got_subcommand("train")) return tokenizer_train_command(tokenizer_train);
    if (tokenizer->got_subcommand("check")) return tokenizer_check_command(tokenizer_check);
    if (tokenizer->got_subcommand("convert")) return tokenizer_convert_command(tokenizer_convert);
    if (loom.got_subcommand("report")) return report_command(report);
    if (config->got_subcommand("keys")) return config_keys_command(config_keys);
    if (data->got_subcommand("prepare")) return data_prepare_command(data_prepare);
    if (ckpt->got_subcommand("export"))
      return ckpt_export_command(*ckpt->get_subcommand("export"), ckpt_export);
    if (ckpt->got_subcommand("verify")) return ckpt_verify_command(ckpt_verify);
    if (loom.got_subcommand("launch")) return launch_command(launch);
    if (loom.got_subcommand("bench"))
      return loom::bench::run_benchmarks(bench.names, bench.options, bench.json_path), 0;
    if (loom.got_subcommand("version")) std::printf("loom 0.1.0\n");
    if (loom.got_subcommand("help")) std::fputs(loom::cli::loom_help(loom).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForHelp&) {
    std::fputs(loom.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return loom::cli::usage_error(loom, e);
  }
}

// --debug (anywhere before a `--`): errors also say which check failed, where in the source.
bool take_debug_flag(int& argc, char** argv) {
  bool debug = false;
  int out = 1;
  bool literal = false;
  for (int i = 1; i < argc; ++i) {
    literal = literal || std::string(argv[i]) == "--";
    if (!literal && std::string(argv[i]) == "--debug") {
      debug = true;
      continue;
    }
    argv[out++] = argv[i];
  }
  argc = out;
  argv[argc] = nullptr;
  return debug;
}

// What the user reads of an error: its message; with --debug also the failed condition and
// its source location (which rank logs always get).
std::string error_text(const std::exception& e, bool debug) {
  const auto* error = dynamic_cast<const loom::Error*>(&e);
  return error && !debug ? error->message() : e.what();
}

int main(int argc, char** argv) {
  loom::cpu::set_wait_policy(argv);  // may start the program again, with the policy set
  const bool debug = take_debug_flag(argc, argv);
  loom::cpu::use_threads(0);  // train sets run.threads once it has read its config
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const loom::train::Preempted& e) {
    // Every rank stops together (they agreed after the step), the checkpoint written.
    std::fprintf(stderr, "loom: %s\n", error_text(e, debug).c_str());
    code = loom::train::kExitPreempted;
  } catch (const loom::train::RunRefused& e) {
    // Every rank refuses together (RunDirectory::open agrees first): no abort needed.
    std::fprintf(stderr, "loom: error: %s\n", error_text(e, debug).c_str());
    code = loom::train::kExitRefused;
  } catch (const std::exception& e) {
    if (loom::dist::world_size() > 1) {
      // The other ranks may be waiting for this one in a collective: end the whole job now.
      std::fprintf(stderr, "loom: error (rank %d): %s\n", loom::dist::world_rank(),
                   error_text(e, debug).c_str());
      loom::cli::stop_rank_logs();
      loom::cli::append_to_rank_log(std::string("loom: error: ") + e.what());  // with where
      loom::dist::abort_job(1);
    }
    std::fprintf(stderr, "loom: error: %s\n", error_text(e, debug).c_str());
  }
  loom::cli::stop_rank_logs();
  loom::dist::shutdown_world();
  return code;
}
