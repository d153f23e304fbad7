// The NCCL backend of ProcessGroup: collectives on GPU memory.
//
// An NCCL group pairs an NCCL communicator with a host group of the same members (MPI, or the
// single-process group): calls on CUDA tensors go to NCCL, calls on host tensors (the losses,
// flags and hashes the training loop agrees on) to the host group, so one group object serves
// both and the callers do not choose. Every member must issue the same calls in the same
// order, as with MPI; the two kinds may interleave freely, since each backend runs its own
// queue (the host group's communication thread, NCCL's stream).
//
// Ordering on the GPU: a call records an event on the compute stream (backend/cuda: every
// kernel runs on one stream) and the communication stream waits for it, so NCCL reads the
// tensor only after the kernels that wrote it; Work::wait() returns once NCCL has finished,
// and what the caller queues afterwards runs after it. A watcher thread per group finishes the
// Work handles in order and diagnoses a call older than the timeout: it aborts the
// communicator and fails the call (and those queued after it), naming it, its sequence number
// and the group, as the MPI backend does.
//
// bf16 is reduced in f32 (widened on the device, reduced, rounded once), as the MPI backend
// promises; f32, i64 and u8 (moved, never reduced) go as they are. send/recv take no tags:
// NCCL matches a pair's transfers in the order they were issued, so `tag` must be 0.
//
// nccl_group.cu implements it when the build has CUDA and NCCL's header; otherwise the stub
// twin no_nccl.cpp, whose nccl_group() fails naming why.
#pragma once
#include <memory>

#include "loom/dist/process_group.h"

namespace loom::dist {

// Whether this build has the NCCL backend.
bool nccl_available();
// A group over the members of `host`. Its NCCL communicator is made at its first call on
// device tensors (collective then: rank 0 makes the unique id and broadcasts it through the
// host group), so groups that only move host tensors cost no GPU memory. The process's GPU is
// the CUDA backend's.
std::shared_ptr<ProcessGroup> nccl_group(std::shared_ptr<ProcessGroup> host, double timeout_s);

}  // namespace loom::dist
