// `loom launch -n N -- COMMAND ...`: N processes through mpirun, supervised with restarts.
#include "launch.h"
#include "commands.h"
#include "numbers.h"

namespace loom::cli {

namespace {

// The run directory of the train command that `launch --max-restarts` supervises (its
// events.jsonl, the ranks' heartbeats), its words read as `loom train` reads them.
train::Config supervised_config(const std::vector<std::string>& command) {
  if (command.empty() || command[0] != "train")
    throw CLI::ValidationError("--max-restarts", "supervises `train` runs only");
  return train_config({command.begin() + 1, command.end()});
}

void add_launch(CLI::App& cmd, LaunchOptions& o) {
  cmd.description(
      "run `loom COMMAND ARGS...` as N processes through mpirun (e.g. -- train cfg.toml); "
      "`mpirun -np N loom train cfg.toml` works as well; with --max-restarts R a failed train "
      "job restarts with --resume auto; with --hang-timeout S a job no rank of which began a "
      "step for S seconds is ended and restarted (start-up excepted: it is bounded by "
      "--startup-timeout, default 600 s); with --min-ranks K a rank lost for good (its "
      "failure twice in a row) or excluded by the run (a straggler) restarts it on fewer "
      "processes, at least K, the global batch kept");
  // From COMMAND's first word on, every word is COMMAND's (its flags too).
  cmd.positionals_at_end();
  add_int(cmd, "-n,--np", o.processes, "processes", 1)->required()->default_str("");
  cmd.add_option("--hostfile", o.hostfile, "OpenMPI's hostfile: where to run")->type_name("FILE");
  add_int(cmd, "--max-restarts", o.max_restarts, "restarts of a failed train job", 0)
      ->type_name("R");
  add_number(cmd, "--hang-timeout", o.hang_timeout_s, "end a job with no step begun for S s", true)
      ->default_str("");
  add_int(cmd, "--min-ranks", o.min_ranks,
          "restart on fewer processes (at least K) without a lost or excluded rank", 1)
      ->type_name("K")
      ->default_str("");
  add_number(cmd, "--regrow-after", o.regrow_after_s,
             "on fewer ranks, try them all again after S s (checkpoint and restart)", true)
      ->default_str("");
  add_number(cmd, "--startup-timeout", o.startup_timeout_s, "bound on start-up (default 600 s)",
             true)
      ->default_str("");
  cmd.add_option("COMMAND", o.command, "the loom command each process runs")->required();
}
int launch_command(const LaunchOptions& o) {
  // Both watches are the supervisor's: without restarts there is none.
  if (o.max_restarts == 0 && o.hang_timeout_s > 0)
    throw CLI::ValidationError("--hang-timeout", "needs --max-restarts");
  if (o.max_restarts == 0 && o.startup_timeout_s >= 0)
    throw CLI::ValidationError("--startup-timeout", "needs --max-restarts");
  if (o.max_restarts == 0 && o.min_ranks > 0)
    throw CLI::ValidationError("--min-ranks", "needs --max-restarts");
  if (o.min_ranks == 0 && o.regrow_after_s > 0)
    throw CLI::ValidationError("--regrow-after", "needs --min-ranks");
  if (o.min_ranks > o.processes)
    throw CLI::ValidationError("--min-ranks", std::to_string(o.min_ranks) + " is more than -n " +
                                                  std::to_string(o.processes));
  check_placement(o);
  if (o.max_restarts == 0) return launch(o, nullptr);
  const train::Config config = supervised_config(o.command);
  return launch(o, &config);
}

}  // namespace

void add_launch_command(CLI::App& loom, int& code) {
  auto o = std::make_shared<LaunchOptions>();
  CLI::App* cmd = loom.add_subcommand("launch");
  add_launch(*cmd, *o);
  cmd->callback([o, &code] { code = launch_command(*o); });
}

}  // namespace loom::cli
