// The world: every process of the job, and the one-time start and stop of the backend.
//
// A process started by mpirun (or srun) joins the MPI world; a process started on its own is
// a world of one and never touches MPI. The world group is the process group registry's root
// (DESIGN rule 6: the only hidden global besides the allocator).
#pragma once
#include <memory>

#include "loom/dist/process_group.h"

namespace loom::dist {

struct DistOptions {
  // A collective or transfer that has not finished after this long aborts the job, naming the
  // operation, its sequence number, the group and the members that had not arrived.
  double timeout_s = 600;
};

// Whether this process was started by an MPI launcher (mpirun, srun with PMIx or PMI2).
bool launched_by_mpi();

// Starts the world once (later calls only update the timeout); returns it.
std::shared_ptr<ProcessGroup> init_world(const DistOptions& options = {});
// The world group (init_world() with default options if nothing started it yet).
std::shared_ptr<ProcessGroup> world();
int world_rank();
int world_size();

// Stops the communication thread and MPI; called once at the end of main.
void shutdown_world();
// Ends the whole job at once with `code` (every rank, through MPI_Abort when under MPI): for
// a rank that failed while the others may be waiting for it in a collective.
[[noreturn]] void abort_job(int code);

}  // namespace loom::dist
