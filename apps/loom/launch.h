// `loom launch -n N [--hostfile FILE] -- COMMAND ARGS...`: runs `loom COMMAND ARGS...` as N
// processes through OpenMPI's mpirun (oversubscribing cores when N exceeds them, and allowed
// to run as root). Plain `mpirun -np N loom train ...` (or srun) works just as well.
// With --max-restarts R (train runs only) it supervises instead of exec'ing: when the job fails
// (a rank killed, crashed or timed out) it is started again with `--resume auto`, up to R
// times, each failure logged with its cause to <run dir>/events.jsonl. With --hang-timeout S it
// also ends (and restarts) a job none of whose ranks has begun a step for S seconds -- a hung
// job, told from a slow one by the ranks' heartbeats. The hang clock starts only once every
// rank has begun its first step of the attempt (start-up: MPI, the model, a checkpoint to
// load, the first batch); start-up has its own bound, --startup-timeout S (default 600 s
// with --hang-timeout, else off), and its message names the ranks that never reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::cli {

struct LaunchOptions {
  int64_t processes = 0;  // -n
  std::string hostfile;
  int64_t max_restarts = 0;
  double hang_timeout_s = 0;
  double startup_timeout_s = -1;     // -1: the default, 600 s once hang_timeout_s is given
  std::vector<std::string> command;  // COMMAND ARGS...: what each process runs after `loom`
};

// Where the processes go, checked before mpirun sees it: a hostfile must exist and hold at least
// one host line of OpenMPI's form (HOST [slots=N] [max_slots=N], # comments), each line named
// when it does not; and N is at most kMaxProcessesPerSlot per slot (the hostfile's slots, a
// line without slots=N counting 1; without a hostfile, this machine's cores). Returns the
// slots; throws a one-line error otherwise.
constexpr int64_t kMaxProcessesPerSlot = 16;
int64_t check_placement(const LaunchOptions& options);

// run_dir: with max_restarts > 0, the run directory of the supervised train command (its
// events.jsonl and the ranks' heartbeats).
int launch(const LaunchOptions& options, const std::string& run_dir);

}  // namespace loom::cli
