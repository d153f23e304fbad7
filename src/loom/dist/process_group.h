// ProcessGroup: collectives and point-to-point transfers among a set of processes.
//
// Every call is asynchronous and returns a Work handle; calls on one group must be made in the
// same order on every member (as in MPI). Tensors are contiguous CPU tensors of f32, bf16, i64
// or u8 (bytes: moved, never reduced); they must stay untouched until the Work has finished.
// bf16 is reduced in f32 (each member widens, the sum is taken in f32, the result is rounded
// once).
//
// Every call counts the bytes this process puts on the wire for it, as the bandwidth-optimal
// algorithm sends them (all_reduce of N bytes over P members: 2 (P-1)/P N; all_gather of a
// chunk c: (P-1) c; reduce_scatter: (P-1)/P N; broadcast: N from the root; all_to_all: what
// goes to the others; send: N): bytes_sent() for the process, ProcessGroup::bytes_sent() for one
// group. The MPI library may pick another algorithm, which can only send more.
//
// Backends: MPI (mpi_group.cpp, one communication thread per process) and the single-member
// group below (no communication at all) for runs that were not started by a launcher.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/work.h"

namespace loom::dist {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// Bytes this process has sent through every group so far (see above).
int64_t bytes_sent();

class ProcessGroup {
 public:
  // rank: this process's index in the group; world_ranks: the world rank of every member.
  ProcessGroup(std::string name, int rank, std::vector<int> world_ranks);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return int(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  std::string describe() const;  // "dp_shard (world ranks 0, 2)"
  // By this process through this group (a wrapper: through the group it wraps).
  virtual int64_t bytes_sent() const { return bytes_sent_; }

  // In place over t; Avg is Sum divided by size() (not for i64).
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op) = 0;
  // in: size() equal chunks along its flat order; member r receives the reduction of chunk r.
  virtual WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  // out: size() chunks, chunk r = member r's in (which may be this member's chunk of out).
  virtual WorkPtr all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;
  // in and out: size() equal chunks; chunk r of in goes to member r, whose chunk (my rank) of
  // out receives it.
  virtual WorkPtr all_to_all(const Tensor& in, const Tensor& out) = 0;
  // As all_to_all with per-member element counts (chunks laid out back to back).
  virtual WorkPtr all_to_all_v(const Tensor& in, const std::vector<int64_t>& in_counts,
                               const Tensor& out, const std::vector<int64_t>& out_counts) = 0;
  virtual WorkPtr send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(const Tensor& t, int src, int tag = 0) = 0;
  virtual WorkPtr barrier() = 0;
  // Collective: the members that pass the same color form a new group, ordered by key.
  virtual std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) = 0;

 protected:
  // Checks shared by the backends; `what` names the call in messages.
  void check_tensor(const Tensor& t, const char* what) const;
  void check_peer(int peer, const char* what) const;
  void check_chunked(const Tensor& whole, const Tensor& chunk, const char* what) const;
  void check_reducible(const Tensor& t, ReduceOp op, const char* what) const;
  // Adds a call's wire bytes to bytes_sent(): `fraction` of `bytes` (a share of the payload).
  void count_sent(int64_t bytes, double fraction = 1.0) const;
  // Where the tensors check_tensor accepts live (the NCCL group's device calls: CUDA).
  DeviceType memory_ = DeviceType::CPU;
  // A group of one member touches no other process's memory: its tensors may be anywhere.
  bool any_memory_ = false;

 private:
  std::string name_;
  int rank_;
  std::vector<int> world_ranks_;
  mutable std::atomic<int64_t> bytes_sent_{0};
};

// The group of one process: every collective is the identity (a copy where in and out differ).
class SingleProcessGroup final : public ProcessGroup {
 public:
  explicit SingleProcessGroup(std::string name, int world_rank = 0);
  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override;
  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  WorkPtr all_gather(const Tensor& in, const Tensor& out) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr all_to_all(const Tensor& in, const Tensor& out) override;
  WorkPtr all_to_all_v(const Tensor& in, const std::vector<int64_t>& in_counts, const Tensor& out,
                       const std::vector<int64_t>& out_counts) override;
  WorkPtr send(const Tensor& t, int dst, int tag) override;
  WorkPtr recv(const Tensor& t, int src, int tag) override;
  WorkPtr barrier() override;
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;
};

}  // namespace loom::dist
