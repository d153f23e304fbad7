#include "loom/dist/process_group.h"

#include <atomic>
#include <cstring>
#include <sstream>

#include "loom/backend/backend.h"
#include "loom/core/error.h"

namespace loom::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

namespace {
std::atomic<int64_t> g_bytes_sent{0};
}  // namespace

int64_t bytes_sent() {
  return g_bytes_sent.load();
}

void ProcessGroup::count_sent(int64_t bytes, double fraction) const {
  if (size() == 1) return;
  const int64_t n = int64_t(double(bytes) * fraction + 0.5);
  g_bytes_sent += n;
  bytes_sent_ += n;
}

void ProcessGroup::check_reducible(const Tensor& t, ReduceOp op, const char* what) const {
  LOOM_CHECK(t.dtype() != DType::U8) << what << " on group " << name_ << ": u8 is moved, never "
                                     << "reduced";
  LOOM_CHECK(!(op == ReduceOp::Avg && t.dtype() == DType::I64))
      << what << " on group " << name_ << ": avg of i64 is not defined";
}

ProcessGroup::ProcessGroup(std::string name, int rank, std::vector<int> world_ranks)
    : name_(std::move(name)), rank_(rank), world_ranks_(std::move(world_ranks)) {
  LOOM_CHECK(rank_ >= 0 && rank_ < int(world_ranks_.size()))
      << "process group " << name_ << ": rank " << rank_ << " of " << world_ranks_.size();
}

std::string ProcessGroup::describe() const {
  std::ostringstream s;
  s << name_ << " (world ranks ";
  for (size_t i = 0; i < world_ranks_.size(); ++i) s << (i ? ", " : "") << world_ranks_[i];
  s << ")";
  return s.str();
}

void ProcessGroup::check_tensor(const Tensor& t, const char* what) const {
  LOOM_CHECK(t.defined()) << what << " on group " << name_ << ": undefined tensor";
  LOOM_CHECK(t.device().type == memory_ || any_memory_)
      << what << " on group " << name_ << ": this backend takes "
      << (memory_ == DeviceType::CPU ? "CPU" : "CUDA") << " tensors, got one on "
      << t.device().str();
  LOOM_CHECK(t.is_contiguous()) << what << " on group " << name_ << ": tensor of shape "
                                << t.shape() << " is not contiguous";
  const DType d = t.dtype();
  LOOM_CHECK(d == DType::F32 || d == DType::BF16 || d == DType::I64 || d == DType::U8)
      << what << " on group " << name_ << ": dtype " << dtype_name(d)
      << " (expected f32, bf16, i64 or u8)";
}

void ProcessGroup::check_peer(int peer, const char* what) const {
  LOOM_CHECK(peer >= 0 && peer < size()) << what << " on group " << name_ << ": peer " << peer
                                         << " is not a member (size " << size() << ")";
}

void ProcessGroup::check_chunked(const Tensor& whole, const Tensor& chunk, const char* what) const {
  check_tensor(whole, what);
  check_tensor(chunk, what);
  LOOM_CHECK(whole.dtype() == chunk.dtype())
      << what << " on group " << name_ << ": dtypes " << dtype_name(whole.dtype()) << " and "
      << dtype_name(chunk.dtype()) << " differ";
  LOOM_CHECK(whole.numel() == chunk.numel() * size())
      << what << " on group " << name_ << ": " << whole.numel() << " elements are not " << size()
      << " chunks of " << chunk.numel();
}

namespace {

// The first n elements of `from` into `to` (contiguous), in host or device memory.
void copy_elements(const Tensor& from, const Tensor& to, int64_t n) {
  if (from.storage() == to.storage() && from.offset() == to.offset()) return;
  if (from.device().type == DeviceType::CPU && to.device().type == DeviceType::CPU) {
    std::memcpy(to.data_ptr(), from.data_ptr(), size_t(n) * dtype_size(from.dtype()));
    return;
  }
  backend_for(to.device())
      .copy(from.as_strided({n}, {1}, from.offset()), to.as_strided({n}, {1}, to.offset()));
}

void copy_bytes(const Tensor& from, const Tensor& to) {
  copy_elements(from, to, from.numel());
}

}  // namespace

SingleProcessGroup::SingleProcessGroup(std::string name, int world_rank)
    : ProcessGroup(std::move(name), 0, {world_rank}) {
  any_memory_ = true;
}

WorkPtr SingleProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  check_reducible(t, op, "all_reduce");
  return finished_work("all_reduce");
}

WorkPtr SingleProcessGroup::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_chunked(in, out, "reduce_scatter");
  check_reducible(in, op, "reduce_scatter");
  copy_bytes(in, out);
  return finished_work("reduce_scatter");
}

WorkPtr SingleProcessGroup::all_gather(const Tensor& in, const Tensor& out) {
  check_chunked(out, in, "all_gather");
  copy_bytes(in, out);
  return finished_work("all_gather");
}

WorkPtr SingleProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  check_peer(root, "broadcast");
  return finished_work("broadcast");
}

WorkPtr SingleProcessGroup::all_to_all(const Tensor& in, const Tensor& out) {
  check_chunked(in, out, "all_to_all");
  copy_bytes(in, out);
  return finished_work("all_to_all");
}

WorkPtr SingleProcessGroup::all_to_all_v(const Tensor& in, const std::vector<int64_t>& in_counts,
                                         const Tensor& out,
                                         const std::vector<int64_t>& out_counts) {
  check_tensor(in, "all_to_all_v");
  check_tensor(out, "all_to_all_v");
  LOOM_CHECK(in_counts.size() == 1 && out_counts.size() == 1 && in_counts[0] == out_counts[0] &&
             in_counts[0] <= in.numel() && out_counts[0] <= out.numel())
      << "all_to_all_v on group " << name() << ": counts do not match the tensors";
  copy_elements(in, out, in_counts[0]);
  return finished_work("all_to_all_v");
}

WorkPtr SingleProcessGroup::send(const Tensor& t, int dst, int tag) {
  LOOM_FAIL() << "send on group " << name() << ": a single-process group has no peer";
}

WorkPtr SingleProcessGroup::recv(const Tensor& t, int src, int tag) {
  LOOM_FAIL() << "recv on group " << name() << ": a single-process group has no peer";
}

WorkPtr SingleProcessGroup::barrier() {
  return finished_work("barrier");
}

std::shared_ptr<ProcessGroup> SingleProcessGroup::split(int color, int key,
                                                        const std::string& name) {
  return std::make_shared<SingleProcessGroup>(name, world_ranks()[0]);
}

}  // namespace loom::dist
