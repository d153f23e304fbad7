// The NCCL process group (nccl_group.h). Built with the real CUDA backend only (the emulated
// backend has no NCCL).
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "loom/backend/cuda/cuda_backend.h"
#include "loom/dist/nccl_group.h"

namespace loom::dist {

namespace {

using Clock = std::chrono::steady_clock;

// NCCL is loaded when a group first needs it (dlopen of libnccl.so.2), not linked: a machine
// without it still trains on one GPU, and says what is missing only when asked for more.
struct NcclApi {
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclCommInitRank) CommInitRank = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclSend) Send = nullptr;
};

const NcclApi& api() {
  static const NcclApi loaded = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    LOOM_CHECK(lib) << "NCCL could not be loaded (" << dlerror() << "): GPU collectives need "
                    << "libnccl.so.2 on the library path (NVIDIA's NCCL, or the one PyTorch's "
                    << "wheels carry)";
    NcclApi n;
    auto load = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      LOOM_CHECK(fn) << "NCCL: libnccl.so.2 has no " << name << " (NCCL 2.19 or later needed)";
    };
    load(n.AllGather, "ncclAllGather");
    load(n.AllReduce, "ncclAllReduce");
    load(n.Broadcast, "ncclBroadcast");
    load(n.CommAbort, "ncclCommAbort");
    load(n.CommDestroy, "ncclCommDestroy");
    load(n.CommGetAsyncError, "ncclCommGetAsyncError");
    load(n.CommInitRank, "ncclCommInitRank");
    load(n.GetErrorString, "ncclGetErrorString");
    load(n.GetLastError, "ncclGetLastError");
    load(n.GetUniqueId, "ncclGetUniqueId");
    load(n.GroupEnd, "ncclGroupEnd");
    load(n.GroupStart, "ncclGroupStart");
    load(n.Recv, "ncclRecv");
    load(n.ReduceScatter, "ncclReduceScatter");
    load(n.Send, "ncclSend");
    return n;
  }();
  return loaded;
}

#define LOOM_NCCL_CHECK(comm, expr)                                                     \
  do {                                                                                  \
    const ncclResult_t loom_nccl_status = (expr);                                       \
    LOOM_CHECK(loom_nccl_status == ncclSuccess)                                         \
        << "NCCL: " #expr " failed: " << api().GetErrorString(loom_nccl_status) << " (" \
        << api().GetLastError(comm) << ")";                                             \
  } while (0)

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
    default:
      LOOM_FAIL() << "dist: no NCCL type for dtype " << dtype_name(d);
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// A device buffer of n f32 (the widened copy of a bf16 operand), counted as communication.
Tensor f32_buffer(const Tensor& like, int64_t n) {
  return Tensor::empty({n}, DType::F32, like.device(), MemCategory::Communication);
}

// What a communicator does across its calls: the stream they run on, and the watcher that
// finishes their Work handles in order (or fails them on a timeout or an NCCL error).
class Communicator {
 public:
  Communicator(ncclComm_t comm, std::string where, double timeout_s)
      : comm_(comm), where_(std::move(where)), timeout_s_(timeout_s) {
    LOOM_CUDA_CHECK(cudaGetDevice(&device_));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    watcher_ = std::thread([this] { watch(); });
  }
  ~Communicator() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watcher_.join();
    if (!aborted_) api().CommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  ncclComm_t comm() const { return comm_; }

  // Queues one call: `enqueue` puts its NCCL operations on `stream` after the compute stream's
  // work so far; `then` (optional) queues compute-stream work that must follow them (narrowing
  // a widened result). `keep` stays alive until the call has finished.
  WorkPtr launch(const std::string& kind, const std::function<void(cudaStream_t)>& enqueue,
                 std::vector<Tensor> keep, const std::function<void()>& then = {}) {
    std::lock_guard<std::mutex> lock(launch_mutex_);
    const int64_t seq = ++seq_;
    auto work = std::make_shared<Work>(kind + " #" + std::to_string(seq) + " on group " + where_);
    {
      std::lock_guard<std::mutex> state(mutex_);
      if (aborted_) {
        work->finish(abort_reason_);
        return work;
      }
    }
    cudaEvent_t ready = new_event();
    LOOM_CUDA_CHECK(cudaEventRecord(ready, cuda::stream()));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    LOOM_CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait has used it
    enqueue(stream_);
    cudaEvent_t done = new_event();
    LOOM_CUDA_CHECK(cudaEventRecord(done, stream_));
    if (then) {
      LOOM_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(), done, 0));
      then();
      LOOM_CUDA_CHECK(cudaEventRecord(done, cuda::stream()));
    }
    {
      std::lock_guard<std::mutex> state(mutex_);
      pending_.push_back({work, done, Clock::now(), std::move(keep)});
    }
    wake_.notify_all();
    return work;
  }

 private:
  struct Pending {
    WorkPtr work;
    cudaEvent_t done;
    Clock::time_point started;
    std::vector<Tensor> keep;
  };

  void watch() {
    cudaSetDevice(device_);  // the device is per thread
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing left
      Pending& p = pending_.front();
      lock.unlock();
      const cudaError_t status = cudaEventQuery(p.done);
      std::string error;
      bool finished = status == cudaSuccess;
      if (status != cudaSuccess && status != cudaErrorNotReady) {
        error = std::string("CUDA error while waiting: ") + cudaGetErrorString(status);
        finished = true;
      }
      ncclResult_t async = ncclSuccess;
      if (!finished && api().CommGetAsyncError(comm_, &async) == ncclSuccess &&
          async != ncclSuccess && async != ncclInProgress) {
        error = std::string("NCCL error: ") + api().GetErrorString(async) + " (" +
                api().GetLastError(comm_) + ")";
        finished = true;
      }
      const double age = std::chrono::duration<double>(Clock::now() - p.started).count();
      if (!finished && age > timeout_s_) {
        std::ostringstream s;
        s << p.work->description() << " has not finished after " << timeout_s_
          << " s (dist.timeout_s): a member has not reached it or has died; the NCCL "
          << "communicator was aborted";
        error = s.str();
        finished = true;
      }
      if (!finished) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        lock.lock();
        continue;
      }
      if (!error.empty()) {
        abort(error);
        lock.lock();
        continue;
      }
      cudaEventDestroy(p.done);
      p.work->finish();
      lock.lock();
      pending_.pop_front();
    }
  }

  // Fails every pending call (the communicator is unusable after an abort).
  void abort(const std::string& reason) {
    if (!aborted_) api().CommAbort(comm_);
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    abort_reason_ = reason;
    for (Pending& p : pending_) {
      p.work->finish(reason);
      cudaEventDestroy(p.done);
    }
    pending_.clear();
  }

  ncclComm_t comm_;
  std::string where_;
  double timeout_s_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::mutex launch_mutex_;  // calls are queued one at a time, in order
  int64_t seq_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  bool stopping_ = false, aborted_ = false;
  std::string abort_reason_;
  std::thread watcher_;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<ProcessGroup> host, double timeout_s)
      : ProcessGroup(host->name(), host->rank(), host->world_ranks()),
        host_(std::move(host)),
        timeout_s_(timeout_s) {
    memory_ = DeviceType::CUDA;
  }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override {
    if (on_host(t)) return host_->all_reduce(t, op);
    check_tensor(t, "all_reduce");
    check_reducible(t, op, "all_reduce");
    LOOM_CHECK(!(op == ReduceOp::Avg && t.dtype() == DType::I64))
        << "all_reduce on group " << name() << ": avg of i64 is not defined";
    count_sent(int64_t(t.nbytes()), 2.0 * double(size() - 1) / double(size()));
    const int64_t n = t.numel();
    if (t.dtype() == DType::BF16) {  // reduced in f32, rounded once
      Tensor wide = f32_buffer(t, n);
      cuda::backend().copy(t, wide);
      return communicator().launch(
          "all_reduce",
          [&](cudaStream_t s) {
            LOOM_NCCL_CHECK(communicator().comm(),
                            api().AllReduce(wide.raw_ptr(), wide.raw_ptr(), size_t(n), ncclFloat32,
                                            nccl_op(op), communicator().comm(), s));
          },
          {t, wide}, [&] { cuda::backend().copy(wide, t); });
    }
    return communicator().launch(
        "all_reduce",
        [&](cudaStream_t s) {
          LOOM_NCCL_CHECK(communicator().comm(),
                          api().AllReduce(t.raw_ptr(), t.raw_ptr(), size_t(n), nccl_type(t.dtype()),
                                          nccl_op(op), communicator().comm(), s));
        },
        {t});
  }

  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    if (on_host(in)) return host_->reduce_scatter(in, out, op);
    check_chunked(in, out, "reduce_scatter");
    check_reducible(in, op, "reduce_scatter");
    count_sent(int64_t(in.nbytes()), double(size() - 1) / double(size()));
    const int64_t n = out.numel();
    if (in.dtype() == DType::BF16) {
      Tensor wide_in = f32_buffer(in, in.numel()), wide_out = f32_buffer(out, n);
      cuda::backend().copy(in.as_strided({in.numel()}, {1}, in.offset()), wide_in);
      return communicator().launch(
          "reduce_scatter",
          [&](cudaStream_t s) {
            LOOM_NCCL_CHECK(
                communicator().comm(),
                api().ReduceScatter(wide_in.raw_ptr(), wide_out.raw_ptr(), size_t(n), ncclFloat32,
                                    nccl_op(op), communicator().comm(), s));
          },
          {in, out, wide_in, wide_out},
          [&] { cuda::backend().copy(wide_out, out.as_strided({n}, {1}, out.offset())); });
    }
    return communicator().launch(
        "reduce_scatter",
        [&](cudaStream_t s) {
          LOOM_NCCL_CHECK(
              communicator().comm(),
              api().ReduceScatter(in.raw_ptr(), out.raw_ptr(), size_t(n), nccl_type(in.dtype()),
                                  nccl_op(op), communicator().comm(), s));
        },
        {in, out});
  }

  WorkPtr all_gather(const Tensor& in, const Tensor& out) override {
    if (on_host(in)) return host_->all_gather(in, out);
    check_chunked(out, in, "all_gather");
    count_sent(int64_t(in.nbytes()), double(size() - 1));
    return communicator().launch(
        "all_gather",
        [&](cudaStream_t s) {
          LOOM_NCCL_CHECK(communicator().comm(),
                          api().AllGather(in.raw_ptr(), out.raw_ptr(), size_t(in.numel()),
                                          nccl_type(in.dtype()), communicator().comm(), s));
        },
        {in, out});
  }

  WorkPtr broadcast(const Tensor& t, int root) override {
    if (on_host(t)) return host_->broadcast(t, root);
    check_tensor(t, "broadcast");
    check_peer(root, "broadcast");
    if (rank() == root) count_sent(int64_t(t.nbytes()));
    return communicator().launch(
        "broadcast",
        [&](cudaStream_t s) {
          LOOM_NCCL_CHECK(communicator().comm(),
                          api().Broadcast(t.raw_ptr(), t.raw_ptr(), size_t(t.numel()),
                                          nccl_type(t.dtype()), root, communicator().comm(), s));
        },
        {t});
  }

  WorkPtr all_to_all(const Tensor& in, const Tensor& out) override {
    if (on_host(in)) return host_->all_to_all(in, out);
    check_tensor(in, "all_to_all");
    check_tensor(out, "all_to_all");
    LOOM_CHECK(in.numel() == out.numel() && in.numel() % size() == 0 && in.dtype() == out.dtype())
        << "all_to_all on group " << name() << ": in and out must be " << size()
        << " equal chunks of one dtype";
    const std::vector<int64_t> counts(size_t(size()), in.numel() / size());
    return exchange("all_to_all", in, counts, out, counts);
  }

  WorkPtr all_to_all_v(const Tensor& in, const std::vector<int64_t>& in_counts, const Tensor& out,
                       const std::vector<int64_t>& out_counts) override {
    if (on_host(in)) return host_->all_to_all_v(in, in_counts, out, out_counts);
    check_tensor(in, "all_to_all_v");
    check_tensor(out, "all_to_all_v");
    int64_t in_total = 0, out_total = 0;
    for (int64_t c : in_counts) in_total += c;
    for (int64_t c : out_counts) out_total += c;
    LOOM_CHECK(int(in_counts.size()) == size() && int(out_counts.size()) == size() &&
               in_total == in.numel() && out_total == out.numel() && in.dtype() == out.dtype())
        << "all_to_all_v on group " << name() << ": " << size() << " counts each, adding up to "
        << "in's and out's elements, of one dtype";
    return exchange("all_to_all_v", in, in_counts, out, out_counts);
  }

  WorkPtr send(const Tensor& t, int dst, int tag) override {
    if (on_host(t)) return host_->send(t, dst, tag);
    check_tensor(t, "send");
    check_peer(dst, "send");
    check_no_tag(tag, "send");
    count_sent(int64_t(t.nbytes()));
    return communicator().launch(
        "send",
        [&](cudaStream_t s) {
          LOOM_NCCL_CHECK(communicator().comm(),
                          api().Send(t.raw_ptr(), size_t(t.numel()), nccl_type(t.dtype()), dst,
                                     communicator().comm(), s));
        },
        {t});
  }

  WorkPtr recv(const Tensor& t, int src, int tag) override {
    if (on_host(t)) return host_->recv(t, src, tag);
    check_tensor(t, "recv");
    check_peer(src, "recv");
    check_no_tag(tag, "recv");
    return communicator().launch(
        "recv",
        [&](cudaStream_t s) {
          LOOM_NCCL_CHECK(communicator().comm(),
                          api().Recv(t.raw_ptr(), size_t(t.numel()), nccl_type(t.dtype()), src,
                                     communicator().comm(), s));
        },
        {t});
  }

  // On the host group: a barrier orders processes, not device work.
  WorkPtr barrier() override { return host_->barrier(); }

  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    return std::make_shared<NcclGroup>(host_->split(color, key, name), timeout_s_);
  }

 private:
  // The communicator, made at the group's first call on device tensors (every member makes
  // that call at the same point of its sequence): groups that only ever move host tensors
  // hold no NCCL resources. Rank 0's unique id travels over the host group.
  Communicator& communicator() {
    if (comm_) return *comm_;
    cuda::stream();  // the process's GPU is chosen (by local rank) before NCCL uses it
    ncclUniqueId id{};
    Tensor bytes = Tensor::empty({int64_t(sizeof id)}, DType::U8);
    if (rank() == 0) {
      LOOM_NCCL_CHECK(nullptr, api().GetUniqueId(&id));
      std::memcpy(bytes.data_ptr(), &id, sizeof id);
    }
    host_->broadcast(bytes, 0)->wait();
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    ncclComm_t comm = nullptr;
    LOOM_NCCL_CHECK(nullptr, api().CommInitRank(&comm, size(), id, rank()));
    comm_ = std::make_unique<Communicator>(comm, describe(), timeout_s_);
    return *comm_;
  }

  static bool on_host(const Tensor& t) { return t.defined() && t.device().type == DeviceType::CPU; }

  void check_no_tag(int tag, const char* what) const {
    LOOM_CHECK(tag == 0) << what << " on group " << name() << ": NCCL transfers take no tags "
                         << "(a pair's transfers match in the order issued), got tag " << tag;
  }

  // Chunk r of `in` (in_counts[r] elements, back to back) to member r; member r's chunk to me
  // into out (out_counts[r]). My own chunk is a device copy.
  WorkPtr exchange(const char* kind, const Tensor& in, const std::vector<int64_t>& in_counts,
                   const Tensor& out, const std::vector<int64_t>& out_counts) {
    const size_t elem = dtype_size(in.dtype());
    count_sent((in.numel() - in_counts[size_t(rank())]) * int64_t(elem));
    return communicator().launch(
        kind,
        [&](cudaStream_t s) {
          std::vector<int64_t> in_at(size_t(size()), 0), out_at(size_t(size()), 0);
          for (int r = 1; r < size(); ++r) {
            in_at[size_t(r)] = in_at[size_t(r - 1)] + in_counts[size_t(r - 1)];
            out_at[size_t(r)] = out_at[size_t(r - 1)] + out_counts[size_t(r - 1)];
          }
          auto* src = static_cast<char*>(in.raw_ptr());
          auto* dst = static_cast<char*>(out.raw_ptr());
          const int me = rank();
          if (in_counts[size_t(me)] > 0)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(
                dst + out_at[size_t(me)] * int64_t(elem), src + in_at[size_t(me)] * int64_t(elem),
                size_t(in_counts[size_t(me)]) * elem, cudaMemcpyDeviceToDevice, s));
          LOOM_NCCL_CHECK(communicator().comm(), api().GroupStart());
          for (int r = 0; r < size(); ++r) {
            if (r == me) continue;
            if (in_counts[size_t(r)] > 0)
              LOOM_NCCL_CHECK(
                  communicator().comm(),
                  api().Send(src + in_at[size_t(r)] * int64_t(elem), size_t(in_counts[size_t(r)]),
                             nccl_type(in.dtype()), r, communicator().comm(), s));
            if (out_counts[size_t(r)] > 0)
              LOOM_NCCL_CHECK(
                  communicator().comm(),
                  api().Recv(dst + out_at[size_t(r)] * int64_t(elem), size_t(out_counts[size_t(r)]),
                             nccl_type(out.dtype()), r, communicator().comm(), s));
          }
          LOOM_NCCL_CHECK(communicator().comm(), api().GroupEnd());
        },
        {in, out});
  }

  std::shared_ptr<ProcessGroup> host_;
  double timeout_s_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace

bool nccl_available() {
  static const bool loadable = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    return lib != nullptr;  // kept open: api() opens the same library
  }();
  return loadable;
}

std::shared_ptr<ProcessGroup> nccl_group(std::shared_ptr<ProcessGroup> host, double timeout_s) {
  LOOM_CHECK(host) << "nccl_group: no host group";
  return std::make_shared<NcclGroup>(std::move(host), timeout_s);
}

}  // namespace loom::dist
