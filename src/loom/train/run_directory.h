// The run directory's lifecycle (docs/resilience.md). A run directory belongs to one run: its
// identity, run.id, is recorded in config.toml and in every checkpoint's trainer_state.json,
// and a lock (run_dir/.lock, flock) is held by the main rank for the process's life, so two
// runs never write one directory.
//  - a fresh run (no --resume) into a used directory (config.toml, latest, metrics.jsonl or a
//    checkpoint in it) stops with an error, unless --overwrite: then the old directory is moved
//    aside to <dir>.overwritten-<UTC time>, not deleted;
//  - --resume continues the directory's own run (the checkpoint `latest` names, or without a
//    usable `latest` the newest verified one; an error if there is none), with the settings
//    its checkpoints were trained with (resume_rules.h: what may change, what is refused);
//  - --resume auto continues from the newest verified checkpoint of the run; a run directory
//    with no checkpoint yet (a supervised job that failed early) starts from step 0.
// Errors here are RunRefused: nothing in the directory was changed, and the launcher does not
// restart a job that was refused.
#pragma once
#include <string>

#include "loom/core/error.h"
#include "loom/dist/process_group.h"
#include "loom/train/checkpoint_dir.h"

namespace loom::train {

// The exit status of a train run its run directory refused (launch does not restart it).
constexpr int kExitRefused = 3;

class RunRefused : public Error {
 public:
  using Error::Error;
};

class RunDirectory {
 public:
  // Collective over `world`: decides on rank 0, the same outcome everywhere (or RunRefused on
  // every rank). wanted_id: run.id from the config ("" to take the directory's or a new one);
  // settings_toml: the run's resolved settings (Config::resolved_toml), compared on --resume
  // with those recorded in the directory's config.toml.
  static RunDirectory open(const std::string& dir, const std::string& wanted_id,
                           const std::string& settings_toml, Resume resume, bool overwrite,
                           dist::ProcessGroup& world);
  RunDirectory(RunDirectory&& other) noexcept;
  RunDirectory& operator=(RunDirectory&&) = delete;
  ~RunDirectory();  // releases the lock

  const std::string& dir() const { return dir_; }
  const std::string& id() const { return id_; }
  // The checkpoint to continue from; "" to start at step 0.
  const std::string& resume_from() const { return resume_from_; }

 private:
  RunDirectory() = default;
  std::string dir_, id_, resume_from_;
  int lock_fd_ = -1;  // the main rank's
};

}  // namespace loom::train
