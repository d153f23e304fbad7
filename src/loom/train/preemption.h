// Preemption: a scheduler (or a person) asks a run to stop by a signal -- SIGTERM, SIGINT or
// SIGUSR1 by default (resilience.preempt_signals). The handler only notes it; at the end of
// the current step the ranks agree (any rank noted one: all stop), write a checkpoint, log a
// `preempted` event and exit with kExitPreempted, which `loom launch` does not restart. A
// second signal during the save changes nothing: the save completes or, killed, leaves the
// previous checkpoint as `latest` (writes are atomic). Once training's last checkpoint is
// written there is nothing left to save: disarm_preemption() gives the signals back their
// default (ending the process), so one during the final evaluation or sampling ends it at once.
#pragma once
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::train {

// The exit status of a preempted run (EX_TEMPFAIL: "try again"; requeue with --resume auto).
constexpr int kExitPreempted = 75;

class Preempted : public Error {
 public:
  using Error::Error;
};

// The exit status of a run that stopped to exclude a rank (a straggler: train/step_guard.h),
// its checkpoint written: `loom launch --min-ranks` restarts it without that rank.
constexpr int kExitExcluded = 76;

class Excluded : public Error {
 public:
  using Error::Error;
};

// "TERM,INT,USR1" -> signal numbers; "" -> none. Unknown names throw naming them.
std::vector<int> parse_signal_names(const std::string& names);
// Installs the noting handler for each signal (replacing the default: ending the process).
void arm_preemption(const std::vector<int>& signals);
// Restores the default action of the armed signals; one already noted is raised now.
void disarm_preemption();
// The signal this process noted, or 0.
int preemption_signal();

}  // namespace loom::train
