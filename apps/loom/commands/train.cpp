// `loom train CONFIG.toml`: a run, or with --dry-run its plan.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "loom/backend/cpu/threads.h"
#include "loom/core/allocator.h"
#include "loom/dist/world.h"
#include "loom/train/config.h"
#include "loom/train/dry_run.h"
#include "loom/train/preemption.h"
#include "loom/train/run_directory.h"
#include "loom/train/trainer.h"
#include "rank_log.h"

namespace loom::cli {

namespace {

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

train::Resume resume_of(const std::string& word) {
  if (word == "auto") return train::Resume::Auto;
  return word == "latest" ? train::Resume::Latest : train::Resume::No;
}

int train_command(const std::string& config_path, std::vector<std::string> overrides,
                  train::Resume resume, bool overwrite) {
  train::Config config = train::load_config(config_path, overrides);
  cpu::use_threads(config.run.threads);
  train::arm_preemption(train::parse_signal_names(config.resilience.preempt_signals));
  dist::init_world({config.parallel.timeout_s});
  train::check_fits_in_memory(config, dist::world_size());
  // run.memory_limit_mb holds from the start: the model build is inside it too.
  host_allocator().set_limit(int64_t(config.run.memory_limit_mb * 1024 * 1024));
  // The run directory first: its lock, and whether this is its own run starting or resuming.
  const train::RunDirectory run = train::RunDirectory::open(
      config.run_dir(), config.run.id, config.resolved_toml, resume, overwrite, *dist::world());
  if (config.run.id != run.id()) {  // recorded in config.toml and the checkpoints
    overrides.push_back("run.id=\"" + run.id() + "\"");
    config = train::load_config(config_path, overrides);
  }
  start_rank_logs(config.run_dir());
  train::train(config, run.resume_from(), resume != train::Resume::No);
  return 0;
}

}  // namespace

void parse_args(CLI::App& app, std::vector<std::string> args) {
  join_resume_auto(args);
  std::reverse(args.begin(), args.end());  // CLI11 takes them as a stack
  app.parse(args);
}

void add_train_command(CLI::App& loom, int& code) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = loom.add_subcommand("train");
  add_train(*cmd, *a);
  cmd->callback([a, &code] {
    if (a->dry_run) {
      std::fputs(train::dry_run_report(a->config, a->overrides, a->processes).c_str(), stdout);
      code = 0;
      return;
    }
    code = train_command(a->config, a->overrides, resume_of(a->resume), a->overwrite);
  });
}

train::Config train_config(const std::vector<std::string>& train_args) {
  CLI::App train;
  TrainArgs a;
  add_train(train, a);
  try {
    parse_args(train, train_args);
  } catch (const CLI::ParseError& e) {
    throw CLI::ValidationError("the train command", e.what());
  }
  return train::load_config(a.config, a.overrides);
}

}  // namespace loom::cli
