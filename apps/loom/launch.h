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
// With --min-ranks K the job is elastic: a rank whose failure ends two attempts in a row is
// lost for good, and a rank the run excludes (a straggler: it exits with kExitExcluded after
// an `exclude` event) is left out; the next attempt runs on the largest world of at least K
// processes the layout allows (train/elastic.h), the global batch kept in more micro-batches,
// and with a hostfile the rank's host (by OpenMPI's placement by slot) is left out of it. Each
// decision is logged to events.jsonl (`elastic`) with its evidence. With --regrow-after S an
// attempt on fewer ranks is asked after S seconds to checkpoint and stop (as a preemption),
// and the next one tries every rank again: a rank that came back trains, one still lost fails
// and is left out again at once (`regrow` and `elastic` events).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/train/config.h"

namespace loom::cli {

struct LaunchOptions {
  int64_t processes = 0;  // -n
  std::string hostfile;
  int64_t max_restarts = 0;
  double hang_timeout_s = 0;
  double startup_timeout_s = -1;     // -1: the default, 600 s once hang_timeout_s is given
  int64_t min_ranks = 0;             // 0: restarts keep the world size
  double regrow_after_s = 0;         // on fewer ranks: try them all again after this long
  std::vector<std::string> command;  // COMMAND ARGS...: what each process runs after `loom`
};

// Where the processes go, checked before mpirun sees it: a hostfile must exist and hold at least
// one host line of OpenMPI's form (HOST [slots=N] [max_slots=N], # comments), each line named
// when it does not; and N is at most kMaxProcessesPerSlot per slot (the hostfile's slots, a
// line without slots=N counting 1; without a hostfile, this machine's cores). Returns the
// slots; throws a one-line error otherwise.
constexpr int64_t kMaxProcessesPerSlot = 16;
int64_t check_placement(const LaunchOptions& options);

// The hosts of a hostfile as check_placement reads it: each host line and its slots.
struct HostLine {
  std::string host, line;
  int64_t slots = 1;
};
std::vector<HostLine> read_hostfile(const std::string& path);

// config: with max_restarts > 0, the supervised train command's (its run directory holds
// events.jsonl and the ranks' heartbeats; --min-ranks plans from its batch and degrees).
int launch(const LaunchOptions& options, const train::Config* config);

}  // namespace loom::cli
