// Console and log files of a job with several processes: the main rank (world rank 0) prints
// to the console and to <run>/logs/rank-0.log; every other rank prints only to its own
// <run>/logs/rank-R.log. Errors (stderr) reach the console from every rank.
#pragma once
#include <string>

namespace loom::cli {

// No-op for a world of one. Call after the world has started.
void start_rank_logs(const std::string& run_dir);
// Flushes and closes the log (joins the console copier of the main rank).
void stop_rank_logs();
// After stop_rank_logs: adds `line` to this rank's log file alone, not the console (an
// error's full text, with the failed check and its source); nothing where no log was started.
void append_to_rank_log(const std::string& line);

}  // namespace loom::cli
