// Faults injected on purpose, to test the machinery that survives them. Off unless the
// environment variable LOOM_FAULT is set:
//
//   LOOM_FAULT="FAULT[;FAULT...]"   FAULT = KIND:key=value[,key=value...]
//
//   kill:rank=R,step=S            rank R kills itself (SIGKILL) as step S begins
//   sleep:rank=R,step=S,ms=M      rank R sleeps M ms in every step from S on
//   slow:rank=R,step=S,factor=F   rank R takes F times as long for every step from S on (it
//                                 sleeps F - 1 times its own compute time: a straggler)
//   nan:rank=R,step=S             rank R's loss of step S is NaN, and so every gradient
//   spike:step=S,factor=F         every rank's loss of step S is F times larger, and so its
//                                 gradients (a corrupted batch: a loss spike)
//   bitflip:rank=R,step=S         rank R flips one bit of its first weight as step S begins
//                                 (silent data corruption: its replicas now disagree); with
//                                 param=P, of its first piece whose name contains P
//   stall:rank=R,step=S           rank R stops for good as step S begins (a hung rank: the
//                                 others' next collective times out)
//   startup:rank=R,ms=M           rank R takes M ms longer to start up: it sleeps before its
//                                 first step (a slow checkpoint load or data staging)
//   corrupt:step=S,file=F         once the checkpoint of step S is written, one byte in the
//                                 middle of its file F flips
//   truncate:step=S,file=F        ... its file F loses its second half
//
// Steps count from 1, as the progress line prints them; ranks are world ranks. Every fault also
// takes attempt=A (default 0): it fires only in the A-th run `loom launch --max-restarts`
// started (LOOM_RESTART=A), so a restarted run does not meet it again; attempt=* fires in
// every run that has the rank (a rank lost for good, until a restart leaves it out).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace loom::train {

class FaultPlan {
 public:
  // From LOOM_FAULT and LOOM_RESTART; a malformed variable is an error naming the fault.
  static FaultPlan from_env();
  static FaultPlan parse(const std::string& spec, int attempt);

  bool empty() const { return faults_.empty(); }
  void at_step_begin(int64_t step, int rank) const;  // kill, sleep, stall
  void at_startup(int rank) const;                   // startup
  bool poisons_loss(int64_t step, int rank) const;   // nan
  double spike(int64_t step) const;                  // spike: F, else 1
  double slowdown(int64_t step, int rank) const;     // slow: F, else 1
  // bitflip: whether, and in the first piece whose name contains *param ("": any)
  bool flips_bit(int64_t step, int rank, std::string* param = nullptr) const;
  bool damages_checkpoint(int64_t step) const;  // corrupt or truncate at this step
  void after_checkpoint(const std::string& dir, int64_t step, int rank) const;  // corrupt, truncate

  static constexpr int kEveryAttempt = -1;  // attempt=*
  struct Fault {
    std::string kind, file, param;
    int rank = 0, attempt = 0;
    int64_t step = 0, ms = 0;
    double factor = 1;
  };

 private:
  std::vector<Fault> faults_;
};

}  // namespace loom::train
