// The `loom` command line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "launch.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/core/allocator.h"
#include "loom/core/error.h"
#include "loom/data/bpe.h"
#include "loom/data/text.h"
#include "loom/dist/world.h"
#include "loom/train/bench.h"
#include "loom/train/config.h"
#include "loom/train/preemption.h"
#include "loom/train/recipes/dit.h"
#include "loom/train/recipes/gpt.h"
#include "loom/train/run_directory.h"
#include "loom/train/trainer.h"
#include "rank_log.h"

namespace {

// Each command's synopsis and what it does: `loom COMMAND --help` prints its own entry,
// `loom --help` (or a bad command) all of them.
struct CommandHelp {
  const char* command;
  const char* text;
};
constexpr CommandHelp kHelp[] = {
    {"train",
     "  train CONFIG.toml [--set section.key=value ...] [--resume [auto] | --overwrite]\n"
     "        [--profile steps=A:B]\n"
     "      train a model (model.kind dit, gpt or vit_classifier); the run directory is\n"
     "      <run.out_dir>/<run.name>, and a fresh run refuses one that holds a run;\n"
     "      --resume: continue it from its `latest` checkpoint; --resume auto: from the\n"
     "      newest one whose checksums all match; --overwrite: move it aside, start anew;\n"
     "      exit status 3: the run directory refused the run (nothing changed there)\n"
     "      --profile: Chrome traces of steps A..B in <run dir>/trace/\n"},
    {"sample",
     "  sample CHECKPOINT_DIR [--per-class N] [--steps N] [--cfg S] [--heun]\n"
     "         [--seed N] [--png PATH] [--npy PREFIX]\n"
     "      sample a DiT checkpoint (EMA weights) into a PNG grid and/or .npy files\n"
     "  sample CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--seed N]\n"
     "      continue a prompt with a GPT checkpoint (temperature 0: greedy)\n"
     "      CHECKPOINT_DIR: a step-NNNNNN directory, or a run directory (its `latest`)\n"},
    {"eval",
     "  eval CHECKPOINT_DIR [--windows N] | [--samples N --steps N --cfg S --classifier DIR]\n"
     "      GPT: held-out loss (nats/token, nats/byte, bits/byte) over the whole held-out\n"
     "      text, or N evenly spread windows of it; DiT: class accuracy and FID of N\n"
     "      samples against the classifier's features (docs/evaluation.md)\n"
     "      CHECKPOINT_DIR: a step-NNNNNN directory, or a run directory (its `latest`)\n"},
    {"tokenizer",
     "  tokenizer train (--input FILE | --kjv [--cache-dir DIR]) --vocab N --out PATH\n"
     "      learn a byte-level BPE tokenizer with N tokens and save it\n"
     "  tokenizer check --tokenizer PATH --input FILE\n"
     "      encode FILE, decode it again and compare (round trip)\n"},
    {"ckpt",
     "  ckpt export CHECKPOINT_DIR OUT.safetensors [--part model|ema|optimizer]\n"
     "      write one part of a (sharded) checkpoint as one consolidated file\n"
     "  ckpt verify CHECKPOINT_DIR\n"
     "      check a checkpoint as resuming would: manifest and its checksum, every tensor\n"
     "      the run's model needs in its shape, every piece against its checksum\n"},
    {"launch",
     "  launch -n N [--hostfile FILE] [--max-restarts R [--hang-timeout S]\n"
     "         [--startup-timeout S]] -- COMMAND ...\n"
     "      run `loom COMMAND ARGS...` as N processes through mpirun (e.g. -- train\n"
     "      cfg.toml); `mpirun -np N loom train cfg.toml` works as well; with\n"
     "      --max-restarts R a failed train job restarts with --resume auto; with\n"
     "      --hang-timeout S a job no rank of which began a step for S seconds is ended\n"
     "      and restarted (start-up excepted: it is bounded by --startup-timeout,\n"
     "      default 600 s)\n"},
    {"bench",
     "  bench [CONFIG ...|all] [--precision f32|bf16] [--warmup N] [--steps N] [--json FILE]\n"
     "        [--trace FILE]\n"
     "      time training steps of the standard models (gpt2_124m, gpt_small,\n"
     "      dit_small; default all): ms/step, tokens or images/s, GFLOP/s and MFU\n"
     "      against a GEMM ceiling measured first (docs/performance.md); --trace:\n"
     "      a Chrome trace of one more step after the timed ones (one config)\n"},
    {"version", "  version\n      print Loom's version\n"},
};

int usage(std::FILE* to = stderr) {
  std::fprintf(to, "usage: loom <command> [args]   (loom <command> --help: that command)\n");
  for (const auto& h : kHelp) std::fputs(h.text, to);
  return to == stderr ? 2 : 0;
}

// `loom COMMAND --help` / `-h` anywhere before a `--` (after it, the words belong to the
// command that launch runs).
bool wants_help(int argc, char** argv) {
  for (int i = 2; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  return false;
}

// Reads the value after flag i, or fails naming the flag.
const char* value_of(int argc, char** argv, int& i) {
  LOOM_CHECK(i + 1 < argc) << argv[i] << " needs a value";
  return argv[++i];
}

int64_t parse_int(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  LOOM_CHECK(end && *end == 0) << flag << ": '" << text << "' is not an integer";
  return v;
}

double parse_double(const char* flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  LOOM_CHECK(end && *end == 0) << flag << ": '" << text << "' is not a number";
  return v;
}

int train(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> overrides;
  loom::train::Resume resume = loom::train::Resume::No;
  bool overwrite = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--overwrite") {
      overwrite = true;
    } else if (a == "--set") {
      overrides.push_back(value_of(argc, argv, i));
    } else if (a == "--profile") {
      // --profile steps=A:B is the config key run.profile_steps.
      const std::string v = value_of(argc, argv, i);
      LOOM_CHECK(v.rfind("steps=", 0) == 0)
          << "train: --profile expects steps=A:B (e.g. --profile steps=5:7), got '" << v << "'";
      overrides.push_back("run.profile_steps=\"" + v.substr(6) + "\"");
    } else if (a == "--resume") {
      resume = loom::train::Resume::Latest;
      if (i + 1 < argc && std::strcmp(argv[i + 1], "auto") == 0) {
        resume = loom::train::Resume::Auto;
        ++i;
      }
    } else if (a.rfind("--", 0) == 0) {
      LOOM_FAIL() << "train: unknown option " << a;
    } else {
      LOOM_CHECK(config_path.empty())
          << "train: more than one config given (" << config_path << ", " << a << ")";
      config_path = a;
    }
  }
  LOOM_CHECK(!config_path.empty()) << "train: no config file given";
  loom::train::Config config = loom::train::load_config(config_path, overrides);
  loom::train::arm_preemption(loom::train::parse_signal_names(config.resilience.preempt_signals));
  loom::dist::init_world({config.parallel.timeout_s});
  loom::train::check_fits_in_memory(config, loom::dist::world_size());
  // run.memory_limit_mb holds from the start: the model build is inside it too.
  loom::host_allocator().set_limit(int64_t(config.run.memory_limit_mb * 1024 * 1024));
  // The run directory first: its lock, and whether this is its own run starting or resuming.
  const loom::train::RunDirectory run = loom::train::RunDirectory::open(
      config.run_dir(), config.run.id, resume, overwrite, *loom::dist::world());
  if (config.run.id != run.id()) {  // recorded in config.toml and the checkpoints
    overrides.push_back("run.id=\"" + run.id() + "\"");
    config = loom::train::load_config(config_path, overrides);
  }
  loom::cli::start_rank_logs(config.run_dir());
  loom::train::train(config, run.resume_from());
  return 0;
}

// The checkpoint directory: the one argument that is not a flag (flags with a value are
// skipped); fails naming the command if there is none.
std::string checkpoint_arg(const char* command, int argc, char** argv,
                           const std::vector<std::string>& valued_flags) {
  std::string ckpt;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      for (const auto& f : valued_flags)
        if (a == f) ++i;
      continue;
    }
    LOOM_CHECK(ckpt.empty()) << command << ": more than one checkpoint directory given (" << ckpt
                             << ", " << a << ")";
    ckpt = a;
  }
  LOOM_CHECK(!ckpt.empty()) << command << ": no checkpoint directory given";
  return loom::train::checkpoint_from_user_path(ckpt);
}

int sample_gpt(const std::string& ckpt, int argc, char** argv) {
  loom::train::GptSampleOptions o;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--prompt")
      o.prompt = value_of(argc, argv, i);
    else if (a == "--tokens")
      o.tokens = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--temperature")
      o.temperature = parse_double(argv[i], value_of(argc, argv, i));
    else if (a == "--seed")
      o.seed = uint64_t(parse_int(argv[i], value_of(argc, argv, i)));
    else if (a.rfind("--", 0) == 0)
      LOOM_FAIL() << "sample: unknown option " << a << " for a GPT checkpoint";
  }
  const std::string text = loom::train::sample_gpt(ckpt, o);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

int sample(int argc, char** argv) {
  const std::string ckpt_dir = checkpoint_arg("sample", argc, argv,
                                              {"--per-class", "--steps", "--cfg", "--seed", "--png",
                                               "--npy", "--prompt", "--tokens", "--temperature"});
  if (loom::train::checkpoint_model_kind(ckpt_dir) == "gpt") return sample_gpt(ckpt_dir, argc, argv);
  loom::train::DitSampleOptions o;
  o.png_path = "samples.png";
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--per-class")
      o.per_class = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--steps")
      o.steps = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--cfg")
      o.cfg_scale = parse_double(argv[i], value_of(argc, argv, i));
    else if (a == "--seed")
      o.seed = uint64_t(parse_int(argv[i], value_of(argc, argv, i)));
    else if (a == "--heun")
      o.heun = true;
    else if (a == "--png")
      o.png_path = value_of(argc, argv, i);
    else if (a == "--npy")
      o.npy_prefix = value_of(argc, argv, i);
    else if (a.rfind("--", 0) == 0)
      LOOM_FAIL() << "sample: unknown option " << a;
  }
  loom::train::sample_dit(ckpt_dir, o);
  return 0;
}

int eval(int argc, char** argv) {
  int64_t windows = 0, samples = 1000, steps = 0;
  double cfg_scale = -1;
  std::string ckpt, classifier = "assets/fmnist_classifier";
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--windows")
      windows = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--samples")
      samples = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--steps")
      steps = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--cfg")
      cfg_scale = parse_double(argv[i], value_of(argc, argv, i));
    else if (a == "--classifier")
      classifier = value_of(argc, argv, i);
    else if (a.rfind("--", 0) == 0)
      LOOM_FAIL() << "eval: unknown option " << a;
    else {
      LOOM_CHECK(ckpt.empty()) << "eval: more than one checkpoint directory given (" << ckpt << ", "
                               << a << ")";
      ckpt = a;
    }
  }
  LOOM_CHECK(!ckpt.empty()) << "eval: no checkpoint directory given";
  ckpt = loom::train::checkpoint_from_user_path(ckpt);
  LOOM_CHECK(windows >= 0) << "eval: --windows must be non-negative (0: all), got " << windows;
  const std::string kind = loom::train::checkpoint_model_kind(ckpt);
  if (kind == "dit") {
    // Sampler settings default to the run's own [sample] section.
    const loom::train::Config cfg = loom::train::load_config(
        (std::filesystem::path(ckpt).parent_path() / "config.toml").string());
    loom::train::DitSampleOptions o;
    o.steps = steps > 0 ? steps : cfg.sample.steps;
    o.cfg_scale = cfg_scale >= 0 ? cfg_scale : cfg.sample.cfg_scale;
    o.heun = cfg.sample.heun;
    o.seed = cfg.run.seed;
    const auto q = loom::train::evaluate_dit_checkpoint(ckpt, classifier, samples, o);
    std::printf(
        "%s: class accuracy %.2f%% of %lld samples, FID %.3f, real-data floor %.3f "
        "(ratio %.1f), cfg %.1f, %lld steps -> %s/eval.json\n",
        ckpt.c_str(), 100.0 * q.class_accuracy, (long long)q.samples, q.fid, q.fid_floor,
        q.fid / q.fid_floor, o.cfg_scale, (long long)o.steps, ckpt.c_str());
    return 0;
  }
  LOOM_CHECK(kind == "gpt") << "eval: " << ckpt << " holds a checkpoint of model kind '" << kind
                            << "', which loom eval does not know";
  const loom::train::LmEvalResult r = loom::train::eval_gpt(ckpt, windows);
  std::printf(
      "held-out loss of %s: %.4f nats/token, %.4f nats/byte, %.4f bits/byte "
      "(%lld windows, %lld tokens, %lld bytes)\n",
      ckpt.c_str(), r.nats_per_token(), r.nats_per_byte(), r.bits_per_byte(), (long long)r.windows,
      (long long)r.tokens, (long long)r.bytes);
  return 0;
}

int tokenizer_train(int argc, char** argv) {
  std::string input, out, cache_dir;
  bool kjv = false;
  int64_t vocab = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--input")
      input = value_of(argc, argv, i);
    else if (a == "--kjv")
      kjv = true;
    else if (a == "--cache-dir")
      cache_dir = value_of(argc, argv, i);
    else if (a == "--vocab")
      vocab = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--out")
      out = value_of(argc, argv, i);
    else
      LOOM_FAIL() << "tokenizer train: unknown argument " << a;
  }
  LOOM_CHECK(kjv != !input.empty())
      << "tokenizer train: give exactly one of --input FILE and --kjv";
  LOOM_CHECK(!out.empty()) << "tokenizer train: no --out PATH given";
  LOOM_CHECK(vocab >= loom::BpeTokenizer::kByteTokens && vocab <= (int64_t(1) << 24))
      << "tokenizer train: --vocab " << vocab << " must be at least "
      << loom::BpeTokenizer::kByteTokens << " (the byte tokens)";
  if (kjv)
    input = loom::kjv_corpus(cache_dir.empty() ? loom::train::default_cache_dir(".") : cache_dir);
  const std::string text = loom::read_text_file(input);
  const loom::BpeTokenizer tok = loom::BpeTokenizer::train(text, int(vocab));
  tok.save(out);
  const size_t tokens = tok.encode(text).size();
  std::printf(
      "tokenizer: %d tokens (%zu merges) learned from %s (%zu bytes) -> %s\n"
      "%s encodes to %zu tokens, %.3f bytes/token; set model.vocab_size = %d\n",
      tok.vocab_size(), tok.merges().size(), input.c_str(), text.size(), out.c_str(), input.c_str(),
      tokens, double(text.size()) / double(std::max<size_t>(tokens, 1)), tok.vocab_size());
  return 0;
}

int tokenizer_check(int argc, char** argv) {
  std::string path, input;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer")
      path = value_of(argc, argv, i);
    else if (a == "--input")
      input = value_of(argc, argv, i);
    else
      LOOM_FAIL() << "tokenizer check: unknown argument " << a;
  }
  LOOM_CHECK(!path.empty() && !input.empty())
      << "tokenizer check: needs --tokenizer PATH and --input FILE";
  const loom::BpeTokenizer tok = loom::BpeTokenizer::load(path);
  const std::string text = loom::read_text_file(input);
  const std::vector<int32_t> ids = tok.encode(text);
  LOOM_CHECK(tok.decode(ids) == text)
      << "tokenizer check: decode(encode(" << input << ")) differs from the file (" << path << ")";
  std::printf(
      "round trip ok: %s (%zu bytes) -> %zu tokens of %s (%d tokens) -> the same bytes "
      "(%.3f bytes/token)\n",
      input.c_str(), text.size(), ids.size(), path.c_str(), tok.vocab_size(),
      double(text.size()) / double(std::max<size_t>(ids.size(), 1)));
  return 0;
}

int tokenizer(int argc, char** argv) {
  LOOM_CHECK(argc >= 1) << "tokenizer: expected a subcommand (train or check)";
  const std::string sub = argv[0];
  if (sub == "train") return tokenizer_train(argc - 1, argv + 1);
  if (sub == "check") return tokenizer_check(argc - 1, argv + 1);
  LOOM_FAIL() << "tokenizer: unknown subcommand '" << sub << "' (expected train or check)";
  return 1;
}

int ckpt_export(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string part = "model";
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--part")
      part = value_of(argc, argv, i);
    else if (a.rfind("--", 0) == 0)
      LOOM_FAIL() << "ckpt export: unknown option " << a;
    else
      positional.push_back(a);
  }
  LOOM_CHECK(positional.size() == 2) << "ckpt export: expected CHECKPOINT_DIR OUT.safetensors, got "
                                     << positional.size() << " paths";
  positional[0] = loom::train::checkpoint_from_user_path(positional[0]);
  const loom::CheckpointReader ckpt(positional[0]);
  const auto tensors = ckpt.read_all(part);
  LOOM_CHECK(!tensors.empty()) << "ckpt export: " << positional[0] << " has no tensors under '"
                               << part << "/'";
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += int64_t(t.nbytes());
  loom::save_safetensors(positional[1], tensors,
                         {{"loom_checkpoint", positional[0]}, {"part", part}});
  std::printf("%s: %zu tensors, %lld bytes (%s of %s)\n", positional[1].c_str(), tensors.size(),
              (long long)bytes, part.c_str(), positional[0].c_str());
  return 0;
}

int ckpt_verify(int argc, char** argv) {
  LOOM_CHECK(argc == 1) << "ckpt verify: expected CHECKPOINT_DIR";
  const std::string dir = loom::train::checkpoint_from_user_path(argv[0]);
  // Exactly what resuming checks: the manifest and its checksum, trainer_state.json, every
  // tensor the run's model needs in its shape, and every piece against its checksum.
  loom::train::verify_checkpoint(dir);
  std::printf("%s: %zu tensors, every checksum matches and resume has all it needs\n",
              dir.c_str(), loom::CheckpointReader(dir).names("").size());
  return 0;
}

int ckpt(int argc, char** argv) {
  LOOM_CHECK(argc >= 1) << "ckpt: expected a subcommand (export or verify)";
  const std::string sub = argv[0];
  if (sub == "export") return ckpt_export(argc - 1, argv + 1);
  if (sub == "verify") return ckpt_verify(argc - 1, argv + 1);
  LOOM_FAIL() << "ckpt: unknown subcommand '" << sub << "' (expected export or verify)";
  return 1;
}

int bench(int argc, char** argv) {
  loom::train::BenchOptions options;
  std::vector<std::string> names;
  std::string json_path;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--precision") {
      options.precision = value_of(argc, argv, i);
    } else if (a == "--warmup") {
      options.warmup = parse_int("--warmup", value_of(argc, argv, i));
    } else if (a == "--steps") {
      options.steps = parse_int("--steps", value_of(argc, argv, i));
    } else if (a == "--json") {
      json_path = value_of(argc, argv, i);
    } else if (a == "--trace") {
      options.trace_path = value_of(argc, argv, i);
    } else if (a.rfind("--", 0) == 0) {
      LOOM_FAIL() << "bench: unknown flag " << a;
    } else if (a == "all") {
      for (const auto& s : loom::train::standard_bench_specs()) names.push_back(s.name);
    } else {
      names.push_back(a);
    }
  }
  if (names.empty())
    for (const auto& s : loom::train::standard_bench_specs()) names.push_back(s.name);
  LOOM_CHECK(options.precision == "f32" || options.precision == "bf16")
      << "bench: --precision must be f32 or bf16, got '" << options.precision << "'";
  std::vector<loom::train::BenchSpec> specs;
  for (const auto& n : names) specs.push_back(loom::train::bench_spec(n));  // all checked first
  LOOM_CHECK(options.trace_path.empty() || specs.size() == 1)
      << "bench: --trace writes one config's step; name one config (got " << specs.size() << ")";
  const loom::DType dtype = options.precision == "bf16" ? loom::DType::BF16 : loom::DType::F32;
  // The ceiling is measured before and after the runs and the higher kept: on a shared
  // machine a moment of contention would otherwise lower it (and inflate MFU).
  const double ceiling_before = loom::train::measure_gemm_ceiling(dtype);
  std::vector<loom::train::BenchResult> results;
  for (const auto& spec : specs) {
    results.push_back(loom::train::run_bench(spec, options, 0));
    const auto& r = results.back();
    std::fprintf(stderr, "%s %s: %.1f ms/step (median of %zu)\n", r.name.c_str(),
                 r.precision.c_str(), r.median_ms, r.step_ms.size());
  }
  const double ceiling = std::max(ceiling_before, loom::train::measure_gemm_ceiling(dtype));
  std::printf(
      "GEMM ceiling (%s, 2048^3 through Loom's matmul, best of 5 before and after): %.1f "
      "GFLOP/s\n",
      options.precision.c_str(), ceiling);
  std::printf("%-10s %-5s %9s %9s %9s %12s %8s %8s %6s\n", "config", "dtype", "median_ms", "min_ms",
              "max_ms", "items/s", "GFLOP", "GFLOP/s", "MFU");
  std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  LOOM_CHECK(json_path.empty() || json) << "bench: cannot open " << json_path << " for writing";
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto& spec = specs[k];
    auto r = results[k];
    r.ceiling_gflops = ceiling;
    r.mfu = r.gflops / ceiling;
    char items[32];
    std::snprintf(items, sizeof items, "%.1f %s", r.items_per_s, spec.unit());
    std::printf("%-10s %-5s %9.1f %9.1f %9.1f %12s %8.1f %8.1f %5.1f%%\n", r.name.c_str(),
                r.precision.c_str(), r.median_ms, r.min_ms, r.max_ms, items, r.gflop_per_step,
                r.gflops, 100.0 * r.mfu);
    if (json) {
      std::string ms;
      for (double t : r.step_ms) ms += (ms.empty() ? "" : ", ") + std::to_string(t);
      std::fprintf(
          json,
          "{\"config\": \"%s\", \"precision\": \"%s\", \"ms\": [%s], \"median_ms\": %.3f, "
          "\"items_per_s\": %.3f, \"unit\": \"%s\", \"gflop_per_step\": %.3f, \"gflops\": %.3f, "
          "\"ceiling_gflops\": %.3f, \"mfu\": %.4f, \"loss\": %.6f}\n",
          r.name.c_str(), r.precision.c_str(), ms.c_str(), r.median_ms, r.items_per_s, spec.unit(),
          r.gflop_per_step, r.gflops, r.ceiling_gflops, r.mfu, r.final_loss);
    }
  }
  if (json) std::fclose(json);
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
  if (wants_help(argc, argv))
    for (const auto& h : kHelp)
      if (cmd == h.command) {
        std::printf("usage: loom %s ...\n%s", h.command, h.text);
        return 0;
      }
  if (cmd == "train") return train(argc - 2, argv + 2);
  if (cmd == "sample") return sample(argc - 2, argv + 2);
  if (cmd == "eval") return eval(argc - 2, argv + 2);
  if (cmd == "tokenizer") return tokenizer(argc - 2, argv + 2);
  if (cmd == "ckpt") return ckpt(argc - 2, argv + 2);
  if (cmd == "bench") return bench(argc - 2, argv + 2);
  if (cmd == "launch") return loom::cli::launch(argc - 2, argv + 2);
  if (cmd == "version") {
    std::printf("loom 0.1.0\n");
    return 0;
  }
  std::fprintf(stderr, "loom: unknown command '%s'\n", cmd.c_str());
  return usage();
}

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const loom::train::Preempted& e) {
    // Every rank stops together (they agreed after the step), the checkpoint written.
    std::fprintf(stderr, "loom: %s\n", e.what());
    code = loom::train::kExitPreempted;
  } catch (const loom::train::RunRefused& e) {
    // Every rank refuses together (RunDirectory::open agrees first): no abort needed.
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    code = loom::train::kExitRefused;
  } catch (const std::exception& e) {
    if (loom::dist::world_size() > 1) {
      // The other ranks may be waiting for this one in a collective: end the whole job now.
      std::fprintf(stderr, "loom: error (rank %d): %s\n", loom::dist::world_rank(), e.what());
      std::printf("loom: error: %s\n", e.what());  // into this rank's log as well
      loom::cli::stop_rank_logs();
      loom::dist::abort_job(1);
    }
    std::fprintf(stderr, "loom: error: %s\n", e.what());
  }
  loom::cli::stop_rank_logs();
  loom::dist::shutdown_world();
  return code;
}
