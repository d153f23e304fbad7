// `loom bench`: training-step throughput of the standard models.
#include "commands.h"
#include "loom/bench/step_bench.h"
#include "numbers.h"

namespace loom::cli {

namespace {

struct BenchArgs {
  std::vector<std::string> names = {"all"};
  std::string json_path;
  bench::BenchOptions options;
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
           a.options.device = d == "cuda" ? Device{DeviceType::CUDA, 0} : cpu_device();
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

void add_bench_command(CLI::App& loom, int& code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = loom.add_subcommand("bench");
  add_bench(*cmd, *a);
  cmd->callback([a, &code] {
    bench::run_benchmarks(a->names, a->options, a->json_path);
    code = 0;
  });
}

}  // namespace loom::cli
