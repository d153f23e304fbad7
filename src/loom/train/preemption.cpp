#include "loom/train/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <sstream>

namespace loom::train {

namespace {

std::atomic<int> noted{0};
std::vector<int> armed;  // set before any signal can arrive; read by disarm_preemption
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void note(int signal) {
  noted.store(signal, std::memory_order_relaxed);
}

constexpr struct {
  const char* name;
  int number;
} kSignals[] = {
    {"TERM", SIGTERM}, {"INT", SIGINT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}};

}  // namespace

std::vector<int> parse_signal_names(const std::string& names) {
  std::vector<int> out;
  std::stringstream list(names);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    if (name.empty()) continue;
    int number = 0;
    for (const auto& s : kSignals)
      if (name == s.name) number = s.number;
    LOOM_CHECK(number != 0) << "signal '" << name << "' is not one of TERM, INT, USR1, USR2, HUP";
    out.push_back(number);
  }
  return out;
}

void arm_preemption(const std::vector<int>& signals) {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = note;
  action.sa_flags = SA_RESTART;  // system calls inside MPI and I/O go on undisturbed
  sigemptyset(&action.sa_mask);
  for (int s : signals) ::sigaction(s, &action, nullptr);
  armed = signals;
}

void disarm_preemption() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int s : armed) ::sigaction(s, &action, nullptr);
  // A signal noted after the last step (while its checkpoint was written) acts now.
  if (const int s = preemption_signal()) ::raise(s);
}

int preemption_signal() {
  return noted.load(std::memory_order_relaxed);
}

}  // namespace loom::train
