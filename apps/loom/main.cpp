// The `loom` command line: registers the commands (apps/loom/commands/, one file each), runs
// the one given, and turns errors into messages and exit statuses.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "commands/commands.h"
#include "help.h"
#include "loom/backend/cpu/threads.h"
#include "loom/core/error.h"
#include "loom/dist/world.h"
#include "loom/train/preemption.h"
#include "loom/train/run_directory.h"
#include "rank_log.h"
#ifdef LOOM_EMULATED_CUDA
#include "loom/backend/cuda/cuda_backend.h"
#endif

namespace {

int run(int argc, char** argv) {
  CLI::App loom{"", "loom"};
  loom.formatter(
      std::make_shared<loom::cli::Help>());  // the subcommands added from here on share both
  loom.option_defaults()->always_capture_default();
  loom.require_subcommand(1);
  int code = 0;  // the command's exit status (its callback sets it)
  loom::cli::add_train_command(loom, code);
  loom::cli::add_sample_command(loom, code);
  loom::cli::add_eval_command(loom, code);
  loom::cli::add_cluster_command(loom, code);
  loom::cli::add_tokenizer_commands(loom, code);
  loom::cli::add_report_command(loom, code);
  loom::cli::add_config_commands(loom, code);
  loom::cli::add_data_commands(loom, code);
  loom::cli::add_ckpt_commands(loom, code);
  loom::cli::add_launch_command(loom, code);
  loom::cli::add_bench_command(loom, code);
  loom.add_subcommand("version", "print Loom's version")->callback([] {
    std::printf("loom 0.1.0\n");
  });
  CLI::App* help = loom.add_subcommand("help")->group("");  // as `loom --help`; not listed
  help->callback([&loom] { std::fputs(loom::cli::loom_help(loom).c_str(), stdout); });
  try {
    loom::cli::parse_args(loom, {argv + 1, argv + argc});
    return code;
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

}  // namespace

int main(int argc, char** argv) {
#ifdef LOOM_EMULATED_CUDA
  // The test build (loom_emulated): the CUDA backend's kernels compiled for the host take the
  // place of the device's.
  loom::register_allocator(loom::DeviceType::CUDA, &loom::cuda_emulated::device_allocator());
  loom::register_backend(loom::DeviceType::CUDA, &loom::cuda_emulated::backend());
#endif
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
  } catch (const loom::train::Excluded& e) {
    // Every rank stops together (the same straggler comparisons), the checkpoint written.
    std::fprintf(stderr, "loom: %s\n", error_text(e, debug).c_str());
    code = loom::train::kExitExcluded;
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
