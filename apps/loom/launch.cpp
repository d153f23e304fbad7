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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/error.h"
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
  bool preempted = false;  // the job checkpointed and stopped on a preemption signal
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
  char buf[4096];
  for (;;) {
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
  out.cause = !hang_cause.empty()    ? hang_cause
              : !error_line.empty()  ? error_line
              : !notice_line.empty() ? notice_line
                                     : "mpirun exited with status " + std::to_string(out.status);
  return out;
}

// Runs the job until it succeeds or has been restarted max_restarts times, each restart from
// the newest valid checkpoint; every failure is logged with its cause to events.jsonl.
int supervise(const std::vector<std::string>& mpirun, const std::vector<std::string>& command,
              int max_restarts, const Watch& watch, const std::string& run_dir) {
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> args = mpirun;
    for (const auto& a : attempt == 0 ? command : resuming(command)) args.push_back(a);
    std::string line;
    for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "launch (attempt %d): %s\n", attempt, line.c_str());
    std::fflush(stderr);
    const Outcome out = run_attempt(args, attempt, run_dir, watch);
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
    const bool give_up = attempt == max_restarts;
    loom::train::append_event(
        run_dir, give_up ? "gave_up" : "restart",
        Json::object({{"attempt", attempt}, {"exit_status", out.status}, {"cause", out.cause}}));
    if (give_up) {
      std::fprintf(stderr, "launch: the job failed %d times; giving up (last cause: %s)\n",
                   attempt + 1, out.cause.c_str());
      return out.status;
    }
    std::fprintf(stderr,
                 "launch: the job failed (%s); restarting from the newest valid "
                 "checkpoint (%d of %d)\n",
                 out.cause.c_str(), attempt + 1, max_restarts);
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

}  // namespace

int64_t check_placement(const LaunchOptions& o) {
  int64_t slots = 0;
  std::string where;
  if (o.hostfile.empty()) {
    slots = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
    where = std::to_string(slots) + " cores here";
  } else {
    namespace fs = std::filesystem;
    LOOM_CHECK(fs::is_regular_file(o.hostfile))
        << "launch --hostfile " << o.hostfile << ": no such file";
    std::ifstream in(o.hostfile);
    LOOM_CHECK(in) << "launch --hostfile " << o.hostfile << ": cannot be read";
    std::string line;
    int64_t hosts = 0;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      line = line.substr(0, line.find('#'));
      std::istringstream words(line);
      std::string host, field;
      if (!(words >> host)) continue;  // blank or a comment
      const bool host_ok = host.find_first_not_of(
                               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                               "TUVWXYZ0123456789.-_:[]") == std::string::npos;
      LOOM_CHECK(host_ok) << "launch --hostfile " << o.hostfile << ", line " << line_no << ": '"
                          << host << "' is not a host name";
      int64_t host_slots = 1;
      while (words >> field) {
        const size_t eq = field.find('=');
        const std::string key = field.substr(0, eq);
        char* end = nullptr;
        const long long v =
            eq == std::string::npos ? 0 : std::strtoll(field.c_str() + eq + 1, &end, 10);
        LOOM_CHECK((key == "slots" || key == "max_slots" || key == "max-slots") && v > 0 && end &&
                   *end == 0)
            << "launch --hostfile " << o.hostfile << ", line " << line_no << ": '" << field
            << "' is not slots=N or max_slots=N (N a positive integer)";
        if (key == "slots") host_slots = v;
      }
      slots += host_slots;
      ++hosts;
    }
    LOOM_CHECK(hosts > 0) << "launch --hostfile " << o.hostfile << " names no host";
    where = std::to_string(slots) + " slots in " + o.hostfile;
  }
  LOOM_CHECK(o.processes <= kMaxProcessesPerSlot * slots)
      << "launch: -n " << o.processes << " is more than " << kMaxProcessesPerSlot
      << " processes per slot (" << where << ": at most " << kMaxProcessesPerSlot * slots << ")";
  return slots;
}

int launch(const LaunchOptions& options, const std::string& run_dir) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {LOOM_MPIRUN, "-np", std::to_string(options.processes),
                                   "--oversubscribe"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  if (!options.hostfile.empty()) args.insert(args.end(), {"--hostfile", options.hostfile});
  args.push_back(self);
  arm_launcher_signals();
  if (options.max_restarts > 0) {
    Watch watch;
    watch.ranks = int(options.processes);
    watch.hang_s = options.hang_timeout_s;
    watch.startup_s = options.startup_timeout_s >= 0 ? options.startup_timeout_s
                      : options.hang_timeout_s > 0   ? kDefaultStartupS
                                                     : 0;
    return supervise(args, options.command, int(options.max_restarts), watch, run_dir);
  }
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
