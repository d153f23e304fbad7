// The CPU kernels' thread count: run.threads, else OMP_NUM_THREADS, else the cores this process
// may use shared by the ranks Open MPI put on its host.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "loom/backend/cpu/threads.h"

namespace {

int affinity_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  EXPECT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  return CPU_COUNT(&mask);
}

TEST(Threads, CountFollowsTheSettingThenTheEnvironmentThenTheCores) {
  const int before = omp_get_max_threads();
  EXPECT_EQ(loom::cpu::use_threads(3), 3);
  EXPECT_EQ(omp_get_max_threads(), 3);
  setenv("OMP_NUM_THREADS", "5", 1);
  EXPECT_EQ(loom::cpu::use_threads(0), 5);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(loom::cpu::use_threads(0), affinity_cores());
  omp_set_num_threads(before);
}

TEST(Threads, RanksOnOneHostShareItsCores) {
  const int cores = affinity_cores();
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  const int shared = loom::cpu::default_threads();
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "64", 1);
  const int crowded = loom::cpu::default_threads();
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (cores >= int(std::thread::hardware_concurrency())) {  // not bound to fewer cores
    EXPECT_EQ(shared, std::max(1, cores / 2));
  } else {
    EXPECT_EQ(shared, cores);  // a binding's cores are this rank's alone
  }
  EXPECT_GE(crowded, 1);
  EXPECT_EQ(loom::cpu::default_threads(), cores);
}

}  // namespace
