#include "loom/backend/cpu/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace loom::cpu {

namespace {

// Cores busy with anything over `seconds` (the whole machine, from /proc/stat); -1 if unknown.
double busy_cores(double seconds) {
  auto sample = [](double& busy, double& all) {
    std::FILE* f = std::fopen("/proc/stat", "r");
    if (!f) return false;
    unsigned long long v[10] = {};
    const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                              &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    std::fclose(f);
    if (n < 5) return false;
    all = 0;
    for (unsigned long long x : v) all += double(x);
    busy = all - double(v[3]) - double(v[4]);  // less idle and iowait
    return true;
  };
  double b0, a0, b1, a1;
  if (!sample(b0, a0)) return -1;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  if (!sample(b1, a1) || a1 <= a0) return -1;
  const double cpus = double(std::thread::hardware_concurrency());
  return (b1 - b0) / (a1 - a0) * cpus;
}

}  // namespace

void set_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const int cores = int(std::thread::hardware_concurrency());
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  std::string reason;
  if (ranks > cores) {
    reason = std::to_string(ranks) + " ranks on " + std::to_string(cores) + " cores";
  } else if (const double busy = busy_cores(0.1); busy >= 0.5) {
    char text[64];
    std::snprintf(text, sizeof text, "cores shared, %.1f busy with other work", busy);
    reason = text;
  }
  if (reason.empty()) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv("LOOM_WAIT_REASON", reason.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run without it
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv("LOOM_WAIT_REASON");
}

const char* wait_policy_description() {
  static const std::string text = [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    const char* reason = std::getenv("LOOM_WAIT_REASON");
    if (policy && reason) return std::string("idle threads sleep: ") + reason;
    if (policy) return std::string("OMP_WAIT_POLICY=") + policy;
    if (spin) return std::string("GOMP_SPINCOUNT=") + spin;
    return std::string("idle threads spin: cores free at start");
  }();
  return text.c_str();
}

int default_threads() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  int cores = ::sched_getaffinity(0, sizeof mask, &mask) == 0
                  ? CPU_COUNT(&mask)
                  : int(std::thread::hardware_concurrency());
  // Open MPI (mpirun, loom launch) names how many ranks it put on this host.
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    const int ranks = std::atoi(local);
    // A mask narrower than the host (a binding) is this rank's alone: not divided again.
    if (ranks > 1 && cores >= int(std::thread::hardware_concurrency())) cores /= ranks;
  }
  return std::max(cores, 1);
}

int use_threads(int64_t requested) {
  int n = int(requested);
  if (n <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    n = env && std::atoi(env) > 0 ? std::atoi(env) : default_threads();
  }
  omp_set_num_threads(n);
  return n;
}

}  // namespace loom::cpu
