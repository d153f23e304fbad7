#include "loom/dist/world.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "loom/dist/mpi_group.h"

namespace loom::dist {

namespace {

std::mutex g_mutex;
std::shared_ptr<ProcessGroup> g_world;
bool g_mpi = false;

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

std::shared_ptr<ProcessGroup> init_world(const DistOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_world) {
    g_mpi = launched_by_mpi();
    g_world =
        g_mpi ? mpi_start_world(options.timeout_s) : std::make_shared<SingleProcessGroup>("world");
  } else if (g_mpi) {
    mpi_set_timeout(options.timeout_s);
  }
  return g_world;
}

std::shared_ptr<ProcessGroup> world() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_world) return g_world;
  }
  return init_world();
}

int world_rank() {
  return world()->rank();
}
int world_size() {
  return world()->size();
}

void shutdown_world() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_mpi) mpi_stop_world();
  g_mpi = false;
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  bool mpi;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    mpi = g_mpi;
  }
  if (mpi) mpi_abort(code);
  std::_Exit(code);
}

}  // namespace loom::dist
