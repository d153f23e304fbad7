// How many threads the CPU kernels use, and how an idle one waits.
//  - The count: run.threads when set (> 0), else OMP_NUM_THREADS when the environment sets it,
//    else the cores this process may run on (its affinity mask) shared by the ranks that
//    Open MPI started on this host.
//  - The wait: OpenMP's threads wait between parallel regions. libgomp's default (a spin of
//    300,000 rounds, then sleep) is the fastest on cores of one's own, and on shared cores the
//    slowest: a step beside one busy process took 3x as long as with OMP_WAIT_POLICY=passive,
//    which alone costs a quarter (docs/performance.md). So where the environment chooses no
//    policy, Loom looks at the machine as it starts: cores busy with other work (half a core or
//    more over 100 ms) or more ranks on the host than cores, and its threads sleep (passive);
//    otherwise libgomp's default stays. The OpenMP runtime reads the policy once, as the program
//    loads, so setting it takes a re-execution of the program at the start of main.
#pragma once
#include <cstdint>

namespace loom::cpu {

// Sets OMP_WAIT_POLICY=PASSIVE (and LOOM_WAIT_REASON, why) and re-executes the program
// (/proc/self/exe, same arguments) when the environment sets neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT and the cores are shared; returns when nothing had to be done or the
// re-execution failed (the program then runs as it is).
void set_wait_policy(char** argv);
// "idle threads sleep: cores shared, 1.0 busy with other work", "idle threads spin: cores free
// at start", or the environment's own choice.
const char* wait_policy_description();

// The cores this process may run on, divided among the ranks on this host (at least 1).
int default_threads();
// requested > 0: that many; 0: OMP_NUM_THREADS if set, else default_threads(). Applies it to
// the OpenMP runtime and returns it.
int use_threads(int64_t requested);

}  // namespace loom::cpu
