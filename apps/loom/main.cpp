// The `loom` command line.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/train/config.h"
#include "loom/train/dit_trainer.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: loom <command> [args]\n"
               "  train CONFIG.toml [--set section.key=value ...] [--resume]\n"
               "      train a model; the run directory is <run.out_dir>/<run.name>\n"
               "  sample CHECKPOINT_DIR [--per-class N] [--steps N] [--cfg S] [--heun]\n"
               "         [--seed N] [--png PATH] [--npy PREFIX]\n"
               "      sample a DiT checkpoint (EMA weights) into a PNG grid and/or .npy files\n"
               "  version\n");
  return 2;
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
  bool resume = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set") {
      overrides.push_back(value_of(argc, argv, i));
    } else if (a == "--resume") {
      resume = true;
    } else if (a.rfind("--", 0) == 0) {
      LOOM_FAIL() << "train: unknown option " << a;
    } else {
      LOOM_CHECK(config_path.empty()) << "train: more than one config given (" << config_path
                                      << ", " << a << ")";
      config_path = a;
    }
  }
  LOOM_CHECK(!config_path.empty()) << "train: no config file given";
  loom::train::Config config = loom::train::load_config(config_path, overrides);
  loom::train::train_dit(config, resume);
  return 0;
}

int sample(int argc, char** argv) {
  LOOM_CHECK(argc >= 1) << "sample: no checkpoint directory given";
  loom::train::DitSampleOptions o;
  o.png_path = "samples.png";
  std::string ckpt;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--per-class") o.per_class = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--steps") o.steps = parse_int(argv[i], value_of(argc, argv, i));
    else if (a == "--cfg") o.cfg_scale = parse_double(argv[i], value_of(argc, argv, i));
    else if (a == "--seed") o.seed = uint64_t(parse_int(argv[i], value_of(argc, argv, i)));
    else if (a == "--heun") o.heun = true;
    else if (a == "--png") o.png_path = value_of(argc, argv, i);
    else if (a == "--npy") o.npy_prefix = value_of(argc, argv, i);
    else if (a.rfind("--", 0) == 0) LOOM_FAIL() << "sample: unknown option " << a;
    else ckpt = a;
  }
  LOOM_CHECK(!ckpt.empty()) << "sample: no checkpoint directory given";
  loom::train::sample_dit(ckpt, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  try {
    const std::string cmd = argv[1];
    if (cmd == "train") return train(argc - 2, argv + 2);
    if (cmd == "sample") return sample(argc - 2, argv + 2);
    if (cmd == "version") {
      std::printf("loom 0.1.0\n");
      return 0;
    }
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 1;
  }
}
