#include "launch.h"

#include "job_stderr.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/train/elastic.h"
#include "loom/train/events.h"
#include "loom/train/preemption.h"
#include "loom/train/run_directory.h"

#ifndef LOOM_MPIRUN
#define LOOM_MPIRUN "mpirun"
#endif

namespace loom::cli {

namespace {

// Start-up bound once the hang watch is on: loading a large checkpoint or staging data on a
// cluster takes minutes, far longer than a sensible hang timeout.
constexpr double kDefaultStartupS = 600;

// mpirun's words for n processes of `self` (this program) on a hostfile ("": here). The
// mpirun is the one the build found; LOOM_MPIRUN in the environment names another (a test's
// wrapper that records what each attempt was given).
std::vector<std::string> mpirun_args(const std::string& self, int64_t n,
                                     const std::string& hostfile) {
  const char* other = std::getenv("LOOM_MPIRUN");
  std::vector<std::string> args = {other && *other ? other : LOOM_MPIRUN, "-np", std::to_string(n),
                                   "--oversubscribe"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  if (!hostfile.empty()) args.insert(args.end(), {"--hostfile", hostfile});
  args.push_back(self);
  return args;
}
using loom::train::kExitExcluded;
using loom::train::kExitPreempted;
using loom::train::kExitRefused;

// The command again with `--resume auto` (what a restart must do).
std::vector<std::string> resuming(std::vector<std::string> command) {
  for (size_t k = 0; k < command.size(); ++k)
    if (command[k] == "--resume") {
      if (k + 1 < command.size() && command[k + 1] == "auto") return command;
      command.insert(command.begin() + ptrdiff_t(k + 1), "auto");
      return command;
    }
  command.insert(command.end(), {"--resume", "auto"});
  return command;
}

struct Outcome {
  int status = 0;          // the exit status, or 128 + signal
  std::string cause;       // the first line that says why, or the status
  int failed_rank = -1;    // the rank that line names first (-1: none)
  bool preempted = false;  // the job checkpointed and stopped on a preemption signal
  bool regrow = false;     // ... because the launcher asked it to, to try every rank again
  JobStderr errors;        // what of its stderr was left out
};

// A preemption signal to the launcher (SIGTERM, SIGINT, SIGUSR1): noted here, passed on to
// the job as SIGUSR1, and the job is not restarted. mpirun forwards SIGUSR1 to every rank and
// waits for them; on SIGTERM it would end the job itself, without waiting for a checkpoint.
std::atomic<int> launcher_signal{0};
void note_signal(int signal) {
  launcher_signal.store(signal);
}
void arm_launcher_signals() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) ::sigaction(s, &action, nullptr);
}
// How long a signalled job may take to checkpoint and stop before it is killed.
constexpr int kPreemptGraceS = 300;

// The supervisor's watch over one attempt. Start-up (MPI init, the model build, loading a
// checkpoint, the first batch) lasts until every rank has written its first heartbeat
// (run_dir/logs/heartbeat-rank-R, at most once a second as a step begins) in this attempt;
// it may take startup_s. Only then does the hang clock run: a job none of whose ranks has
// written a heartbeat for hang_s has hung. 0 turns either check off.
struct Watch {
  int ranks = 1;
  double hang_s = 0, startup_s = 0;
  // An elastic job on fewer ranks than asked: after this long the attempt is asked to
  // checkpoint and stop (as a preemption) so the next one can try every rank again (0: never).
  double regrow_s = 0;
};

// "" while the attempt (started at attempt_start, running for running_s) is starting up or
// making progress, else why it is to be ended.
std::string stalled(const std::string& run_dir, const Watch& watch, double running_s,
                    std::filesystem::file_time_type attempt_start) {
  namespace fs = std::filesystem;
  if (watch.hang_s <= 0 && watch.startup_s <= 0) return "";
  const auto now = fs::file_time_type::clock::now();
  std::vector<bool> reported(size_t(watch.ranks), false);
  std::string beats;
  double newest_age = running_s;
  std::error_code ec;
  if (fs::is_directory(run_dir + "/logs", ec))
    for (const auto& e : fs::directory_iterator(run_dir + "/logs", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("heartbeat-rank-", 0) != 0) continue;
      const auto written = fs::last_write_time(e.path(), ec);
      // A heartbeat left by an earlier attempt or run says nothing about this one.
      if (ec || written < attempt_start) continue;
      const int rank = std::atoi(name.c_str() + 15);
      if (rank < 0 || rank >= watch.ranks) continue;
      reported[size_t(rank)] = true;
      const double age = std::chrono::duration<double>(now - written).count();
      newest_age = std::min(newest_age, age);
      std::string what;
      std::getline(std::ifstream(e.path()), what);
      beats += (beats.empty() ? "" : ", ") + ("rank " + name.substr(15)) + ": " + what + ", " +
               std::to_string(int(age)) + " s ago";
    }
  std::string silent;
  for (int r = 0; r < watch.ranks; ++r)
    if (!reported[size_t(r)]) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
  if (!silent.empty()) {  // still starting up
    if (watch.startup_s <= 0 || running_s < watch.startup_s) return "";
    return "start-up took more than " + std::to_string(int(watch.startup_s)) +
           " s (launch --startup-timeout): rank(s) " + silent + " of " +
           std::to_string(watch.ranks) + " never began a step" +
           (beats.empty() ? "" : "; heartbeats: " + beats);
  }
  if (watch.hang_s <= 0 || newest_age < watch.hang_s) return "";
  return "no progress for " + std::to_string(int(watch.hang_s)) + " s (launch --hang-timeout); " +
         "last heartbeats: " + beats;
}

// The number after the first "rank " in line ("process rank 3 with PID", "LOOM_FAULT: rank 3
// kills itself", "loom: error (rank 3)"), or -1.
int rank_named(const std::string& line) {
  for (size_t at = line.find("rank "); at != std::string::npos; at = line.find("rank ", at + 1)) {
    const char* digits = line.c_str() + at + 5;
    if (*digits >= '0' && *digits <= '9') return std::atoi(digits);
  }
  return -1;
}

// Runs args with LOOM_RESTART=attempt, passing its output through; keeps the line of its
// stderr that best says why it failed. A job that does not start up in time or stops making
// progress (see stalled()) is ended with SIGTERM (then SIGKILL).
Outcome run_attempt(const std::vector<std::string>& args, int attempt, const std::string& run_dir,
                    const Watch& watch) {
  int pipe_fds[2];
  LOOM_CHECK(::pipe(pipe_fds) == 0) << "launch: pipe: " << std::strerror(errno);
  const auto start = std::chrono::steady_clock::now();
  // Half a second of slack for the file system's coarser clock.
  const auto attempt_start =
      std::filesystem::file_time_type::clock::now() - std::chrono::milliseconds(500);
  const pid_t pid = ::fork();
  LOOM_CHECK(pid >= 0) << "launch: fork: " << std::strerror(errno);
  if (pid == 0) {
    // A process group of its own (the whole job can be ended at once; a terminal's Ctrl-C
    // reaches the launcher, which passes it on), and it is told if the launcher dies.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGUSR1);  // as a preemption: checkpoint and stop
    ::setenv("LOOM_RESTART", std::to_string(attempt).c_str(), 1);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::vector<char*> cargs;
    for (const auto& a : args) cargs.push_back(const_cast<char*>(a.c_str()));
    cargs.push_back(nullptr);
    ::execvp(cargs[0], cargs.data());
    std::fprintf(stderr, "launch: cannot run %s: %s\n", cargs[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  std::string error_line, notice_line, hang_cause, line;
  bool preempted = false;
  JobStderr shown;
  // Each whole line: kept if it says why the job failed, printed as JobStderr decides.
  auto take_line = [&] {
    if (error_line.empty() && line.find("loom: error") != std::string::npos) error_line = line;
    if (line.rfind("loom: preempted", 0) == 0) preempted = true;
    if (notice_line.empty() && (line.find("exited on signal") != std::string::npos ||
                                line.find("LOOM_FAULT") != std::string::npos))
      notice_line = line;
    const std::string out = shown.take(line);
    ::write(STDERR_FILENO, out.data(), out.size());
    line.clear();
  };
  int forwarded = 0;
  bool regrow = false;
  char buf[4096];
  for (;;) {
    if (watch.regrow_s > 0 && forwarded == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            watch.regrow_s) {
      forwarded = SIGUSR1;
      regrow = true;
      std::fprintf(stderr,
                   "launch: %d s on fewer ranks than asked (--regrow-after): asking the job to "
                   "checkpoint and stop, to try every rank again\n",
                   int(watch.regrow_s));
      ::kill(pid, SIGUSR1);
      std::thread([pid] {
        std::this_thread::sleep_for(std::chrono::seconds(kPreemptGraceS));
        ::kill(-pid, SIGKILL);
      }).detach();
    }
    if (const int s = launcher_signal.load(); s != 0 && forwarded == 0) {
      forwarded = s;
      std::fprintf(stderr,
                   "launch: signal %d: asking the job to checkpoint and stop (SIGUSR1 "
                   "to every rank; killed after %d s)\n",
                   s, kPreemptGraceS);
      ::kill(pid, SIGUSR1);
      std::thread([pid] {
        std::this_thread::sleep_for(std::chrono::seconds(kPreemptGraceS));
        ::kill(-pid, SIGKILL);
      }).detach();
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {  // quiet for a second: is the job still moving?
      const double running =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (hang_cause.empty() &&
          !(hang_cause = stalled(run_dir, watch, running, attempt_start)).empty()) {
        std::fprintf(stderr, "launch: %s; ending the job\n", hang_cause.c_str());
        ::kill(pid, SIGTERM);
        std::thread([pid] {  // mpirun forwards SIGTERM to the ranks; a stuck one gets SIGKILL
          std::this_thread::sleep_for(std::chrono::seconds(10));
          ::kill(pid, SIGKILL);
        })
            .detach();
      }
      continue;
    }
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t k = 0; k < n; ++k) {
      if (buf[k] == '\n')
        take_line();
      else
        line += buf[k];
    }
  }
  if (!line.empty()) take_line();  // a last line without its newline
  const std::string held = shown.finish();
  ::write(STDERR_FILENO, held.data(), held.size());
  ::close(pipe_fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  // Nothing of the job outlives it (ranks that mpirun left behind included).
  ::kill(-pid, SIGKILL);
  Outcome out;
  out.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  out.preempted = preempted || (forwarded != 0 && out.status == kExitPreempted);
  out.errors = shown;
  if (out.preempted) out.status = kExitPreempted;
  out.regrow = regrow && out.preempted && launcher_signal.load() == 0;
  out.cause = !hang_cause.empty()    ? hang_cause
              : !error_line.empty()  ? error_line
              : !notice_line.empty() ? notice_line
                                     : "mpirun exited with status " + std::to_string(out.status);
  // The rank that failed: a signal or an injected fault names it (the others' errors follow
  // from it: a collective timed out waiting for it), else the first error.
  out.failed_rank = rank_named(notice_line.empty() ? error_line : notice_line);
  return out;
}

// Where an attempt runs and the batch regrouping it needs: what an elastic restart changes.
struct Placement {
  int64_t processes = 0;
  std::string hostfile;  // "": this machine
  int64_t batch_size = 0, grad_accum = 1;
  int64_t workers = 0;  // DiLoCo's workers (0: no DiLoCo)
};

// An elastic job's bounds and the run's layout (--min-ranks; min_ranks 0: off).
struct Elastic {
  int64_t min_ranks = 0;
  dist::ParallelDims dims;
  double regrow_s = 0;  // --regrow-after (0: stay on fewer ranks)
};

// A rank to leave out of the next attempt, and why.
struct Exclusion {
  int rank = -1;
  std::string reason;
  Json evidence;
};

// The run's events.jsonl from line `from` on (the lines an attempt added), as JSON.
std::vector<Json> events_from(const std::string& run_dir, size_t from) {
  std::vector<Json> out;
  std::ifstream in(run_dir + "/events.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    if (n < from) continue;
    try {
      out.push_back(Json::parse(line));
    } catch (const std::exception&) {  // a line cut by a crash: not an event
    }
  }
  return out;
}

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The rank the run left out in an attempt's events: an `exclude` (a straggler; the run exited
// with kExitExcluded), or the one rank a `replica_mismatch` found apart from the majority.
std::optional<Exclusion> excluded_by_run(const std::vector<Json>& events) {
  std::optional<Exclusion> found;
  for (const Json& e : events) {
    const std::string event = e.at("event").as_string();
    if (event == "exclude")
      found = Exclusion{int(e.at("rank").as_int()), e.at("reason").as_string(), e};
    if (event == "replica_mismatch" && e.at("ranks").as_array().size() == 1)
      found = Exclusion{int(e.at("ranks").as_array()[0].as_int()), "replica_mismatch", e};
  }
  return found;
}

// The next placement without `rank`: the largest world of at least min_ranks the layout
// allows, on this machine's slots or the hostfile less the rank's host (OpenMPI places ranks
// by slot, host after host). Throws, saying why, where there is none.
Placement without(const Placement& p, int rank, const Elastic& elastic, const std::string& run_dir,
                  int attempt, std::string& host) {
  Placement next = p;
  int64_t most = p.processes - 1;
  if (!p.hostfile.empty()) {
    const std::vector<HostLine> hosts = read_hostfile(p.hostfile);
    int64_t total = 0;
    for (const HostLine& h : hosts) total += h.slots;
    // Rank r sits on the host whose slots hold r (mod the slots, as oversubscription wraps).
    std::vector<int64_t> ranks_on(hosts.size(), 0);
    size_t of_rank = 0;
    for (int64_t r = 0; r < p.processes; ++r) {
      int64_t at = r % total;
      size_t h = 0;
      while (at >= hosts[h].slots) at -= hosts[h++].slots;
      ++ranks_on[h];
      if (r == rank) of_rank = h;
    }
    host = hosts[of_rank].host;
    LOOM_CHECK(hosts.size() > 1) << "its host " << host << " is the hostfile's only one";
    most = p.processes - ranks_on[of_rank];
    next.hostfile = run_dir + "/logs/hostfile-attempt-" + std::to_string(attempt);
    std::ofstream out(next.hostfile);
    for (size_t h = 0; h < hosts.size(); ++h)
      if (h != of_rank) out << hosts[h].line << "\n";
    LOOM_CHECK(out.flush()) << "cannot write " << next.hostfile;
  }
  const std::optional<train::ElasticLayout> layout =
      train::elastic_layout(elastic.dims, p.batch_size, p.grad_accum, p.processes, most,
                            elastic.min_ranks, p.workers > 0);
  LOOM_CHECK(layout) << "no world of " << elastic.min_ranks << " to " << most
                     << " processes splits the global batch of " << p.batch_size * p.grad_accum
                     << " under the run's parallel degrees (" << elastic.dims.str() << ")";
  next.processes = layout->processes;
  next.batch_size = layout->batch_size;
  next.grad_accum = layout->grad_accum;
  next.workers = layout->workers;
  return next;
}

// Runs the job until it succeeds or has been restarted max_restarts times, each restart from
// the newest valid checkpoint; every failure is logged with its cause to events.jsonl. An
// elastic job leaves out a rank lost for good (its failure ending two attempts in a row) or
// excluded by the run.
int supervise(const std::string& self, Placement place, const std::vector<std::string>& command,
              int max_restarts, Watch watch, const Elastic& elastic, const std::string& run_dir) {
  const Placement asked = place;
  int last_failed = -1, failures = 0;
  std::string last_cause;
  std::vector<int> left_out;  // ranks an earlier attempt went on without
  for (int attempt = 0;; ++attempt) {
    const bool regrouped =
        place.batch_size != asked.batch_size || place.grad_accum != asked.grad_accum;
    std::vector<std::string> args = mpirun_args(self, place.processes, place.hostfile);
    for (const auto& a : attempt == 0 ? command : resuming(command)) args.push_back(a);
    if (regrouped)
      args.insert(args.end(), {"--set", "train.batch_size=" + std::to_string(place.batch_size),
                               "--set", "train.grad_accum=" + std::to_string(place.grad_accum)});
    if (place.workers != asked.workers)  // DiLoCo: workers left (the config's own when back)
      args.insert(args.end(), {"--set", "lowcomm.workers=" + std::to_string(place.workers), "--set",
                               "parallel.dp_replicate=" + std::to_string(place.workers)});
    std::string line;
    for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "launch (attempt %d): %s\n", attempt, line.c_str());
    std::fflush(stderr);
    watch.ranks = int(place.processes);
    watch.regrow_s = place.processes < asked.processes ? elastic.regrow_s : 0;
    const size_t events_before = count_lines(run_dir + "/events.jsonl");
    const Outcome out = run_attempt(args, attempt, run_dir, watch);
    if (out.regrow) {  // checkpointed on our request: every rank is tried again
      loom::train::append_event(run_dir, "regrow",
                                Json::object({{"attempt", attempt + 1},
                                              {"processes", asked.processes},
                                              {"from_processes", place.processes}}));
      std::fprintf(stderr, "launch: trying all %lld processes again\n", (long long)asked.processes);
      place = asked;
      last_failed = -1;
      continue;
    }
    if (out.preempted) {  // checkpointed on request: the scheduler requeues, we do not restart
      std::fprintf(stderr,
                   "launch: the job was preempted and checkpointed; not restarting "
                   "(exit status %d; continue with --resume auto)\n",
                   kExitPreempted);
      return kExitPreempted;
    }
    if (out.status == 0) {
      if (attempt > 0)
        loom::train::append_event(run_dir, "completed", Json::object({{"attempts", attempt + 1}}));
      return 0;
    }
    if (out.status == kExitRefused) {  // the run directory refused it: a restart would too
      std::fprintf(stderr, "launch: the run directory refused the job (%s); not restarting\n",
                   out.cause.c_str());
      return out.status;
    }
    const bool give_up = failures++ == max_restarts;
    loom::train::append_event(
        run_dir, give_up ? "gave_up" : "restart",
        Json::object({{"attempt", attempt}, {"exit_status", out.status}, {"cause", out.cause}}));
    if (give_up) {
      std::fprintf(stderr, "launch: the job failed %d times; giving up (last cause: %s)\n",
                   attempt + 1, out.cause.c_str());
      return out.status;
    }
    // An elastic job leaves out a rank the run excluded (a straggler; the one replica apart
    // from the majority), or one that failed twice in a row, or again after a regrow.
    std::optional<Exclusion> excluded;
    if (elastic.min_ranks > 0) {
      excluded = excluded_by_run(events_from(run_dir, events_before));
      const bool again = out.failed_rank >= 0 && out.failed_rank == last_failed;
      const bool before =
          out.failed_rank >= 0 && std::count(left_out.begin(), left_out.end(), out.failed_rank);
      if (!excluded && again)
        excluded = Exclusion{
            out.failed_rank, "lost",
            Json::object({{"failures", Json::array({Json(last_cause), Json(out.cause)})}})};
      else if (!excluded && before)  // left out before and tried again: lost at its first failure
        excluded = Exclusion{out.failed_rank, "lost",
                             Json::object({{"failures", Json::array({Json(out.cause)})},
                                           {"left_out_before", true}})};
    }
    last_failed = out.failed_rank;
    last_cause = out.cause;
    if (excluded) {
      std::string host;
      Placement next;
      try {
        host = excluded->evidence.contains("host") ? excluded->evidence.at("host").as_string()
                                                   : "this machine";
        next = without(place, excluded->rank, elastic, run_dir, attempt + 1, host);
      } catch (const Error& e) {
        loom::train::append_event(run_dir, "gave_up",
                                  Json::object({{"attempt", attempt},
                                                {"rank", excluded->rank},
                                                {"reason", excluded->reason},
                                                {"cause", std::string(e.what())}}));
        std::fprintf(stderr, "launch: rank %d is %s, and the job cannot go on without it: %s\n",
                     excluded->rank, excluded->reason.c_str(), e.what());
        return out.status;
      }
      loom::train::append_event(run_dir, "elastic",
                                Json::object({{"attempt", attempt + 1},
                                              {"left_out_rank", excluded->rank},
                                              {"host", host},
                                              {"reason", excluded->reason},
                                              {"evidence", excluded->evidence},
                                              {"processes", next.processes},
                                              {"batch_size", next.batch_size},
                                              {"grad_accum", next.grad_accum},
                                              {"workers", next.workers},
                                              {"hostfile", next.hostfile}}));
      std::fprintf(stderr,
                   "launch: rank %d (%s) is %s; going on with %lld processes instead of %lld%s, "
                   "the global batch of %lld as %lld x %lld (batch_size x grad_accum)\n",
                   excluded->rank, host.c_str(),
                   excluded->reason == "lost" ? "lost (it failed twice in a row)"
                                              : ("excluded (" + excluded->reason + ")").c_str(),
                   (long long)next.processes, (long long)place.processes,
                   next.workers > 0 ? (" (" + std::to_string(next.workers) + " DiLoCo workers of " +
                                       std::to_string(asked.workers) + ")")
                                          .c_str()
                                    : "",
                   (long long)(next.batch_size * next.grad_accum), (long long)next.batch_size,
                   (long long)next.grad_accum);
      place = next;
      left_out.push_back(excluded->rank);
      last_failed = -1;
    }
    std::fprintf(stderr,
                 "launch: the job failed (%s); restarting from the newest valid "
                 "checkpoint (%d of %d)\n",
                 out.cause.c_str(), failures, max_restarts);
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

}  // namespace

std::vector<HostLine> read_hostfile(const std::string& path) {
  namespace fs = std::filesystem;
  LOOM_CHECK(fs::is_regular_file(path)) << "launch --hostfile " << path << ": no such file";
  std::ifstream in(path);
  LOOM_CHECK(in) << "launch --hostfile " << path << ": cannot be read";
  std::vector<HostLine> hosts;
  std::string text;
  for (int line_no = 1; std::getline(in, text); ++line_no) {
    const std::string line = text.substr(0, text.find('#'));
    std::istringstream words(line);
    std::string host, field;
    if (!(words >> host)) continue;  // blank or a comment
    const bool host_ok = host.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                             "TUVWXYZ0123456789.-_:[]") == std::string::npos;
    LOOM_CHECK(host_ok) << "launch --hostfile " << path << ", line " << line_no << ": '" << host
                        << "' is not a host name";
    HostLine h{host, line, 1};
    while (words >> field) {
      const size_t eq = field.find('=');
      const std::string key = field.substr(0, eq);
      char* end = nullptr;
      const long long v =
          eq == std::string::npos ? 0 : std::strtoll(field.c_str() + eq + 1, &end, 10);
      LOOM_CHECK((key == "slots" || key == "max_slots" || key == "max-slots") && v > 0 && end &&
                 *end == 0)
          << "launch --hostfile " << path << ", line " << line_no << ": '" << field
          << "' is not slots=N or max_slots=N (N a positive integer)";
      if (key == "slots") h.slots = v;
    }
    hosts.push_back(h);
  }
  LOOM_CHECK(!hosts.empty()) << "launch --hostfile " << path << " names no host";
  return hosts;
}

int64_t check_placement(const LaunchOptions& o) {
  int64_t slots = 0;
  std::string where;
  if (o.hostfile.empty()) {
    slots = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
    where = std::to_string(slots) + " cores here";
  } else {
    for (const HostLine& h : read_hostfile(o.hostfile)) slots += h.slots;
    where = std::to_string(slots) + " slots in " + o.hostfile;
  }
  LOOM_CHECK(o.processes <= kMaxProcessesPerSlot * slots)
      << "launch: -n " << o.processes << " is more than " << kMaxProcessesPerSlot
      << " processes per slot (" << where << ": at most " << kMaxProcessesPerSlot * slots << ")";
  return slots;
}

int launch(const LaunchOptions& options, const train::Config* config) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  arm_launcher_signals();
  if (options.max_restarts > 0) {
    LOOM_CHECK(config) << "launch: a supervised job needs its train config";
    Watch watch;
    watch.hang_s = options.hang_timeout_s;
    watch.startup_s = options.startup_timeout_s >= 0 ? options.startup_timeout_s
                      : options.hang_timeout_s > 0   ? kDefaultStartupS
                                                     : 0;
    Placement place{options.processes, options.hostfile, config->train.batch_size,
                    config->train.grad_accum, config->diloco ? config->diloco->workers : 0};
    Elastic elastic{options.min_ranks, config->parallel.topology.dims, options.regrow_after_s};
    return supervise(self, place, options.command, int(options.max_restarts), watch, elastic,
                     config->run_dir());
  }
  std::vector<std::string> args = mpirun_args(self, options.processes, options.hostfile);
  args.insert(args.end(), options.command.begin(), options.command.end());

  std::string line;
  for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
  std::fprintf(stderr, "launch: %s\n", line.c_str());
  std::fflush(stderr);
  // Not exec'd: the launcher stays to pass signals on and to leave no process behind.
  const Outcome out = run_attempt(args, 0, "", Watch{});
  if (out.status != 0 && !out.preempted) {  // the launcher's one line, after the job's error
    const JobStderr& e = out.errors;
    std::string said = e.saw_error() ? "; its error is above" : "";
    if (e.saw_error() && !e.first_error_rank().empty())
      said = "; the error above is rank " + e.first_error_rank() + "'s";
    if (e.repeats_left_out() > 0)
      said += " (" + std::to_string(e.repeats_left_out()) + " more rank" +
              (e.repeats_left_out() > 1 ? "s" : "") + " printed the same)";
    std::fprintf(stderr, "launch: the job failed with exit status %d%s\n", out.status,
                 said.c_str());
  }
  return out.status;
}

}  // namespace loom::cli
