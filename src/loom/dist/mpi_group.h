// The MPI backend of ProcessGroup (used through world.h).
//
// All MPI calls of the process run on one communication thread: the caller's thread only
// queues an operation and gets a Work handle back, so communication overlaps compute. The
// thread starts nonblocking MPI operations in queue order (so every member starts a group's
// collectives in the same order) and polls them, sleeping briefly between polls so it does
// not take a core from compute. An operation older than the timeout is diagnosed (each member
// is asked, over a side channel, which operation of the group it reached last) and the job is
// aborted with that report.
#pragma once
#include <memory>

#include "loom/dist/process_group.h"

namespace loom::dist {

std::shared_ptr<ProcessGroup> mpi_start_world(double timeout_s);
void mpi_set_timeout(double timeout_s);
void mpi_stop_world();
[[noreturn]] void mpi_abort(int code);

}  // namespace loom::dist
