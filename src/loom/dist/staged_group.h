// A process group that moves device tensors through host memory: the device group of ranks
// that cannot use NCCL between them (several processes sharing one GPU, which NCCL refuses,
// and the CUDA backend's host emulation, where CI runs device code).
//
// It wraps a host group of the same members (MPI, or the single-process group). A call on
// host tensors is the host group's. A call on device tensors copies them to host memory (the
// backend's copy follows the kernels that wrote them), runs the host group's call on the
// copies, and copies the results back when the caller waits: the same asynchronous Work
// handles, call order, timeouts and diagnoses as the host group, at the price of two copies
// over the host link per call. Each Work of a device call must be waited for from one thread
// (its copy back runs there).
#pragma once
#include <memory>

#include "loom/dist/process_group.h"

namespace loom::dist {

std::shared_ptr<ProcessGroup> staged_device_group(std::shared_ptr<ProcessGroup> host);

}  // namespace loom::dist
