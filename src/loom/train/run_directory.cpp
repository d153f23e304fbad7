#include "loom/train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <toml++/toml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "loom/ops/ops.h"
#include "loom/train/events.h"
#include "loom/train/resume_rules.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// 16 hex digits, from the kernel's entropy and the time.
std::string new_run_id() {
  std::random_device entropy;
  const uint64_t v = (uint64_t(entropy()) << 32 | entropy()) ^ uint64_t(std::time(nullptr));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

std::string utc_stamp() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &utc);
  return buf;
}

// run.id of the directory's config.toml; "" when it has none (or no config.toml).
std::string recorded_run_id(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.toml";
  if (!fs::exists(path)) return "";
  try {
    const toml::table t = toml::parse_file(path.string());
    return t["run"]["id"].value_or(std::string());
  } catch (const toml::parse_error& e) {
    throw RunRefused("run directory " + dir + ": its config.toml cannot be read (" +
                     std::string(e.description()) + "); it is not a run Loom can continue");
  }
}

// What makes a directory a used one, as a phrase ("" when unused).
std::string used_by(const std::string& dir) {
  std::string what;
  for (const char* f : {"config.toml", "latest", "metrics.jsonl"})
    if (fs::exists(fs::path(dir) / f)) what += std::string(what.empty() ? "" : ", ") + f;
  const auto checkpoints = list_checkpoints(dir);
  if (!checkpoints.empty())
    what += (what.empty() ? "" : ", ") + std::to_string(checkpoints.size()) +
            " checkpoint(s), the newest of step " + std::to_string(checkpoints.back().step);
  return what;
}

// Locks dir/.lock for this process (released when fd is closed); refuses when another
// process holds it, naming that process.
int lock_directory(const std::string& dir) {
  fs::create_directories(dir);
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  LOOM_CHECK(fd >= 0) << "cannot open " << path << ": " << std::strerror(errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string holder(256, '\0');
    const ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? size_t(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd);
    throw RunRefused("run directory " + dir + " is in use by another run (" +
                     (holder.empty() ? "lock " + path : holder) +
                     "); two runs must not write one directory");
  }
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who =
      "pid " + std::to_string(::getpid()) + " on " + host + " since " + utc_stamp() + "\n";
  if (::ftruncate(fd, 0) == 0) ::pwrite(fd, who.data(), who.size(), 0);
  return fd;
}

struct Decision {
  std::string id, resume_from;
};

// Rank 0: the run this directory will hold and where it continues from.
// The step a checkpoint directory ".../step-NNNNNN" holds.
int64_t step_of(const std::string& checkpoint) {
  const std::string name = fs::path(checkpoint).filename().string();
  LOOM_CHECK(name.rfind("step-", 0) == 0) << checkpoint << " is not a step-NNNNNN directory";
  return std::stoll(name.substr(5));
}

// A resumed run keeps the settings its checkpoints were trained with (resume_rules.h).
void check_resume_settings(const std::string& dir, const std::string& id,
                           const std::string& settings_toml, int64_t step) {
  const std::string recorded = dir + "/config.toml";
  if (!fs::is_regular_file(recorded)) return;
  std::ifstream in(recorded);
  const std::string recorded_toml((std::istreambuf_iterator<char>(in)), {});
  const ResumeChanges changes = compare_for_resume(recorded_toml, settings_toml, step);
  if (!changes.refused.empty()) {
    std::string list;
    for (const std::string& c : changes.refused) list += (list.empty() ? "" : "; ") + c;
    throw RunRefused("--resume: run " + id + " in " + dir +
                     " must keep the settings its checkpoints were trained with, but " + list +
                     ". Keep them, or start a new run (another run.name, or --overwrite)");
  }
  for (const std::string& c : changes.extended)
    std::printf("resume: the run is extended, %s\n", c.c_str());
  if (!changes.regrouped.empty()) std::printf("resume: %s\n", changes.regrouped.c_str());
}

Decision decide(const std::string& dir, const std::string& wanted_id,
                const std::string& settings_toml, Resume resume, bool overwrite, int& lock_fd) {
  lock_fd = lock_directory(dir);
  const std::string used = used_by(dir);
  Decision d;
  if (resume == Resume::No) {
    if (!used.empty()) {
      if (!overwrite)
        throw RunRefused("run directory " + dir + " already holds a run (" + used +
                         "); --resume continues it, --overwrite moves it aside and starts "
                         "anew, or choose another run.name / run.out_dir");
      const std::string aside = dir + ".overwritten-" + utc_stamp();
      fs::rename(dir, aside);
      const int old_fd = lock_fd;
      lock_fd = lock_directory(dir);
      ::close(old_fd);
      std::printf("overwrite: the earlier run in %s was moved to %s\n", dir.c_str(), aside.c_str());
    }
    d.id = wanted_id.empty() ? new_run_id() : wanted_id;
    return d;
  }
  const std::string recorded = recorded_run_id(dir);
  if (used.empty()) {
    if (resume == Resume::Latest)
      throw RunRefused("--resume: " + dir +
                       " holds no run to continue (no config.toml, no "
                       "checkpoint); start it without --resume");
    d.id = wanted_id.empty() ? new_run_id() : wanted_id;
    std::printf("resume auto: %s holds no run yet; starting run %s from step 0\n", dir.c_str(),
                d.id.c_str());
    return d;
  }
  if (!wanted_id.empty() && wanted_id != recorded)
    throw RunRefused("run directory " + dir + " holds run '" + recorded + "', not run.id '" +
                     wanted_id + "'");
  d.id = recorded;
  try {
    d.resume_from = choose_resume_checkpoint(dir, d.id, resume);
  } catch (const RunRefused&) {
    throw;
  } catch (const Error& e) {
    throw RunRefused(e.what());
  }
  if (!d.resume_from.empty())
    check_resume_settings(dir, d.id, settings_toml, step_of(d.resume_from));
  if (d.resume_from.empty()) {
    if (resume == Resume::Latest)
      throw RunRefused("--resume: run " + d.id + " in " + dir + " has no checkpoint yet (" + used +
                       "); --resume auto starts it again from step 0");
    std::printf(
        "resume auto: run %s in %s has no checkpoint on disk yet; it starts from step 0 "
        "unless in-memory checkpoints restore it\n",
        d.id.c_str(), dir.c_str());
  }
  return d;
}

// Rank 0's text on every rank (i64 words: the collectives carry them exactly).
std::string broadcast_text(const std::string& text, dist::ProcessGroup& world) {
  Tensor length = from_vector(std::vector<int64_t>{int64_t(text.size())}, {1});
  world.broadcast(length, 0)->wait();
  const int64_t n = to_vector_i64(length)[0];
  std::vector<int64_t> words(size_t((n + 7) / 8) + 1, 0);
  if (world.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  Tensor t = from_vector(words, {int64_t(words.size())});
  world.broadcast(t, 0)->wait();
  words = to_vector_i64(t);
  return std::string(reinterpret_cast<const char*>(words.data()), size_t(n));
}

}  // namespace

RunDirectory RunDirectory::open(const std::string& dir, const std::string& wanted_id,
                                const std::string& settings_toml, Resume resume, bool overwrite,
                                dist::ProcessGroup& world) {
  LOOM_CHECK(!(overwrite && resume != Resume::No)) << "--overwrite and --resume exclude each other";
  RunDirectory run;
  run.dir_ = dir;
  // Rank 0 decides; the outcome travels as "ok\n<id>\n<checkpoint>" or "refused\n<why>".
  std::string outcome;
  if (world.rank() == 0) {
    try {
      const Decision d = decide(dir, wanted_id, settings_toml, resume, overwrite, run.lock_fd_);
      outcome = "ok\n" + d.id + "\n" + d.resume_from;
    } catch (const RunRefused& e) {
      outcome = std::string("refused\n") + e.what();
    }
  }
  outcome = broadcast_text(outcome, world);
  if (outcome.rfind("refused\n", 0) == 0) throw RunRefused(outcome.substr(8));
  const size_t a = outcome.find('\n', 3);
  run.id_ = outcome.substr(3, a - 3);
  run.resume_from_ = outcome.substr(a + 1);
  return run;
}

RunDirectory::RunDirectory(RunDirectory&& other) noexcept
    : dir_(std::move(other.dir_)),
      id_(std::move(other.id_)),
      resume_from_(std::move(other.resume_from_)),
      lock_fd_(other.lock_fd_) {
  other.lock_fd_ = -1;
}

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace loom::train
