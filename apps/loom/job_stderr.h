// What of a job's stderr reaches the console under `loom launch`: an error that several ranks
// print (a bad config: every rank reads it) appears once, from the first rank that printed it,
// and OpenMPI's banners that only say a rank stopped with an error (MPI_ABORT, "Primary job
// terminated normally, but ...", its help-aggregation notes) are left out: the launcher's own
// one-line summary follows instead. Everything else passes unchanged, a crash's banner included.
#pragma once
#include <string>

namespace loom::cli {

class JobStderr {
 public:
  // One line of the job's stderr (without its newline): what to print for it now ("" nothing;
  // a banner is held until it closes).
  std::string take(const std::string& line);
  // At the job's end: anything still held (a banner that never closed).
  std::string finish();
  // The first error's rank ("" if the error did not name one) and the copies left out.
  const std::string& first_error_rank() const { return first_rank_; }
  bool saw_error() const { return !first_error_.empty(); }
  int repeats_left_out() const { return repeats_; }

 private:
  std::string first_error_, first_rank_, banner_;
  bool in_banner_ = false;
  int repeats_ = 0;
};

}  // namespace loom::cli
