#include "job_stderr.h"

#include <regex>

namespace loom::cli {

namespace {

// OpenMPI frames its notices with a line of dashes.
bool is_rule(const std::string& line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
}

// A banner that says no more than that a rank ended with an error (already printed by it).
bool says_only_a_rank_failed(const std::string& banner) {
  for (const char* text : {"MPI_ABORT was invoked", "Primary job  terminated normally",
                           "Primary job terminated normally",
                           "mpirun detected that one or more processes exited with non-zero",
                           "mpirun has exited due to process rank"})
    if (banner.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

std::string JobStderr::take(const std::string& line) {
  if (in_banner_) {
    banner_ += line + "\n";
    if (!is_rule(line)) return "";
    in_banner_ = false;
    std::string banner;
    banner.swap(banner_);
    return says_only_a_rank_failed(banner) ? "" : banner;
  }
  if (is_rule(line)) {
    in_banner_ = true;
    banner_ = line + "\n";
    return "";
  }
  // "[host:pid] 3 more processes have sent help message ...", how to see them all, and
  // OpenMPI's own error in gathering such messages as a job aborts (show_help.c).
  static const std::regex aggregated(
      R"(^\[[^\]]*\] (\d+ more process|Set MCA parameter "orte_base_help_aggregate"|)"
      R"(\[\[[0-9,]+\],[0-9]+\] ORTE_ERROR_LOG: .*show_help\.c))");
  if (std::regex_search(line, aggregated)) return "";
  static const std::regex error(R"(^loom: error(?: \(rank (\d+)\))?: (.*)$)");
  std::smatch m;
  if (std::regex_match(line, m, error)) {
    if (first_error_.empty()) {
      first_error_ = m[2];
      first_rank_ = m[1];
    } else if (m[2] == first_error_) {
      ++repeats_;
      return "";
    }
  }
  return line + "\n";
}

std::string JobStderr::finish() {
  std::string held;
  held.swap(banner_);
  in_banner_ = false;
  return held;
}

}  // namespace loom::cli
