// A job in which one rank never reaches a collective (or a transfer): the others must abort
// with a message naming the operation and the missing rank, within the timeout, not hang.
// Usage: mpirun -np N dist_timeout_probe collective|stopped|recv
// (stopped: rank 1 is stopped by SIGSTOP, so it cannot even answer the diagnosis)
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "loom/dist/world.h"
#include "loom/ops/ops.h"

int main(int argc, char** argv) {
  using namespace loom;
  const char* mode = argc > 1 ? argv[1] : "collective";
  const bool p2p = std::strcmp(mode, "recv") == 0;
  auto w = dist::init_world({/*timeout_s=*/2});
  Tensor t = full({4}, 1.0);
  w->all_reduce(t, dist::ReduceOp::Sum)->wait();  // #1: everyone arrives
  if (p2p) {
    // Rank 0 waits for a message rank 1 never sends; rank 1 goes on sleeping.
    if (w->rank() == 0) w->recv(t, 1, 5)->wait();
  } else if (w->rank() == 1) {
    if (std::strcmp(mode, "stopped") == 0) std::raise(SIGSTOP);
  } else {
    w->all_reduce(t, dist::ReduceOp::Sum)->wait();  // #2: rank 1 never gets here in time
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::printf("rank %d: not aborted\n", w->rank());
  dist::shutdown_world();
  return 0;
}
