#include "loom/dist/mpi_group.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>

#include "loom/core/dtype.h"
#include "loom/core/error.h"
#include "loom/core/trace.h"

namespace loom::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagQuery = 1, kTagReply = 2;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::BF16:
      return MPI_UINT16_T;  // moved as bits; reduced after widening to f32
    case DType::I64:
      return MPI_INT64_T;
    case DType::U8:
      return MPI_UINT8_T;
    default:
      LOOM_FAIL() << "dist: no MPI type for dtype " << dtype_name(d);
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
}

int mpi_count(int64_t n, const char* what) {
  LOOM_CHECK(n >= 0 && n <= INT_MAX)
      << what << ": " << n << " elements is more than one MPI call can move (2^31 - 1)";
  return int(n);
}

// bf16 <-> f32 scratch for reductions (counted as communication buffers).
Tensor widened(const Tensor& t) {
  Tensor f = Tensor::empty(t.shape(), DType::F32, t.device(), MemCategory::Communication);
  const bf16* src = t.data<bf16>();
  float* dst = f.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = to_f32(src[i]);
  return f;
}

// dst = src / divisor (divisor 1: a copy), narrowed to dst's dtype.
void store_divided(const Tensor& src, const Tensor& dst, double divisor) {
  const float* s = src.data<float>();
  const float d = float(divisor);
  if (dst.dtype() == DType::BF16) {
    bf16* o = dst.data<bf16>();
    for (int64_t i = 0; i < dst.numel(); ++i) o[i] = to_bf16(divisor == 1 ? s[i] : s[i] / d);
  } else {
    float* o = dst.data<float>();
    for (int64_t i = 0; i < dst.numel(); ++i) o[i] = divisor == 1 ? s[i] : s[i] / d;
  }
}

// One queued operation: `start` posts nonblocking MPI requests (or does blocking work and
// posts none), `complete` runs once they have all finished.
struct Op {
  WorkPtr work;
  int group_id = 0;
  int64_t seq = 0;             // collectives: the group's sequence number; p2p: 0
  std::vector<int> waits_for;  // world ranks whose participation completes it
  std::string where;           // "group dp (world ranks 0, 1)"
  std::function<void(std::vector<MPI_Request>&)> start;
  std::function<void()> complete;
  std::vector<MPI_Request> requests;
  Clock::time_point started;
  // For the profiler: the call's name, the bytes this rank hands to it, the group, and (while
  // recording) its start and the lane of the "collectives" tracks it occupies.
  const char* kind = "";
  int64_t bytes = 0;
  std::string group;
  int64_t trace_start_ns = 0;
  int trace_lane = -1;
};

class CommThread {
 public:
  explicit CommThread(double timeout_s) : timeout_s_(timeout_s) {
    MPI_Comm_dup(MPI_COMM_WORLD, &diag_);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    host_ = host;
    post_query_recv();
    thread_ = std::thread([this] { loop(); });
  }

  // Joins the thread once every queued and running operation has finished.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    MPI_Cancel(&query_req_);
    MPI_Wait(&query_req_, MPI_STATUS_IGNORE);
    for (auto& r : replies_) MPI_Wait(&r.request, MPI_STATUS_IGNORE);
    replies_.clear();
    MPI_Comm_free(&diag_);
    stopped_ = true;
  }
  bool stopped() const { return stopped_; }

  void set_timeout(double s) { timeout_s_ = s; }

  int new_group_id() {
    std::lock_guard<std::mutex> lock(entered_mutex_);
    entered_.push_back(0);
    return int(entered_.size()) - 1;
  }

  WorkPtr submit(std::unique_ptr<Op> op) {
    LOOM_CHECK(!stopped_) << "dist: " << op->work->description()
                          << " after the communication thread stopped";
    WorkPtr w = op->work;
    if (op->seq > 0) {
      std::lock_guard<std::mutex> lock(entered_mutex_);
      entered_[size_t(op->group_id)] = op->seq;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(op));
    }
    wake_.notify_all();
    return w;
  }

  // Runs fn on the communication thread (blocking MPI calls such as communicator splits).
  void run(const std::string& what, std::function<void()> fn) {
    auto op = std::make_unique<Op>();
    op->work = std::make_shared<Work>(what);
    op->start = [fn = std::move(fn)](std::vector<MPI_Request>&) { fn(); };
    submit(std::move(op))->wait();
  }

  [[noreturn]] void abort(int code) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abort_code_ = code;
    }
    wake_.notify_all();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

 private:
  // Collectives in flight overlap in time, so each gets a lane (a track of its own) that is
  // free when it starts: events on one track never overlap.
  void trace_begin(Op& op) {
    op.trace_start_ns = trace::now_ns();
    size_t lane = 0;
    while (lane < lane_busy_.size() && lane_busy_[lane]) ++lane;
    if (lane == lane_busy_.size()) {
      lane_busy_.push_back(false);
      lane_tids_.push_back(trace::virtual_track("collectives " + std::to_string(lane)));
    }
    lane_busy_[lane] = true;
    op.trace_lane = int(lane);
  }
  void trace_end(Op& op) {
    if (op.trace_lane < 0) return;
    lane_busy_[size_t(op.trace_lane)] = false;
    std::string args = "\"bytes\": " + std::to_string(op.bytes) + ", \"group\": \"" + op.group +
                       "\", \"work\": \"" + op.work->description() + "\"";
    trace::complete(op.kind, "collective", op.trace_start_ns, trace::now_ns(), std::move(args),
                    lane_tids_[size_t(op.trace_lane)]);
  }

  void loop() {
    std::vector<std::unique_ptr<Op>> running;
    Clock::time_point busy_since{};  // when `running` last became non-empty
    for (;;) {
      std::deque<std::unique_ptr<Op>> fresh;
      bool stopping;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Idle: look for diagnostic queries every 2 ms. Busy: poll every ~50 us.
        const auto nap =
            running.empty() ? std::chrono::microseconds(2000) : std::chrono::microseconds(50);
        if (queue_.empty() && abort_code_ < 0 && !(stopping_ && running.empty()))
          wake_.wait_for(lock, nap,
                         [&] { return !queue_.empty() || abort_code_ >= 0 || stopping_; });
        fresh.swap(queue_);
        stopping = stopping_;
        if (abort_code_ >= 0) {
          std::fflush(stdout);
          std::fflush(stderr);
          MPI_Abort(MPI_COMM_WORLD, abort_code_);
        }
      }
      if (running.empty() && !fresh.empty()) busy_since = Clock::now();
      for (auto& op : fresh) {
        op->started = Clock::now();
        if (trace::recording()) trace_begin(*op);
        try {
          op->start(op->requests);
        } catch (const std::exception& e) {
          trace_end(*op);  // frees its lane
          op->work->finish(e.what());
          continue;
        }
        running.push_back(std::move(op));
      }
      for (size_t i = 0; i < running.size();) {
        Op& op = *running[i];
        int done = 1;
        if (!op.requests.empty())
          MPI_Testall(int(op.requests.size()), op.requests.data(), &done, MPI_STATUSES_IGNORE);
        if (!done) {
          if (timeout_s_ > 0 && seconds_between(op.started, Clock::now()) > timeout_s_)
            diagnose_and_abort(op);
          ++i;
          continue;
        }
        std::string error;
        try {
          if (op.complete) op.complete();
        } catch (const std::exception& e) {
          error = e.what();
        }
        // Counted before the waiter wakes, so its reading of comm_times() includes this op.
        std::unique_ptr<Op> finished = std::move(running[i]);
        trace_end(*finished);
        running.erase(running.begin() + ptrdiff_t(i));
        if (running.empty()) add_in_flight_seconds(seconds_between(busy_since, Clock::now()));
        finished->work->finish(error);
      }
      service_queries();
      if (stopping && running.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (queue_.empty()) return;
      }
    }
  }

  void post_query_recv() {
    MPI_Irecv(&query_in_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTagQuery, diag_, &query_req_);
  }

  int64_t entered(int64_t group_id) {
    std::lock_guard<std::mutex> lock(entered_mutex_);
    return group_id >= 0 && group_id < int64_t(entered_.size()) ? entered_[size_t(group_id)] : -1;
  }

  // Answers other ranks' "which operation of group g did you reach last?" queries.
  void service_queries() {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      MPI_Test(&query_req_, &flag, &status);
      if (!flag) break;
      replies_.push_back(Reply{entered(query_in_), MPI_REQUEST_NULL});
      MPI_Isend(&replies_.back().value, 1, MPI_INT64_T, status.MPI_SOURCE, kTagReply, diag_,
                &replies_.back().request);
      post_query_recv();
    }
    for (auto it = replies_.begin(); it != replies_.end();) {
      int flag = 0;
      MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE);
      it = flag ? replies_.erase(it) : std::next(it);
    }
  }

  // Asks every rank the operation waits for how far it got on the group, then aborts the
  // job with the answer.
  [[noreturn]] void diagnose_and_abort(const Op& op) {
    const size_t n = op.waits_for.size();
    std::vector<int64_t> reached(n, -1);
    std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
    int64_t group_id = op.group_id;
    for (size_t i = 0; i < n; ++i) {
      MPI_Irecv(&reached[i], 1, MPI_INT64_T, op.waits_for[i], kTagReply, diag_, &receives[i]);
      MPI_Isend(&group_id, 1, MPI_INT64_T, op.waits_for[i], kTagQuery, diag_, &sends[i]);
    }
    std::vector<bool> answered(n, false);
    const auto deadline = Clock::now() + std::chrono::milliseconds(2000);
    size_t answers = 0;
    while (answers < n && Clock::now() < deadline) {
      for (size_t i = 0; i < n; ++i) {
        if (answered[i]) continue;
        int flag = 0;
        MPI_Test(&receives[i], &flag, MPI_STATUS_IGNORE);
        if (flag) answered[i] = true, ++answers;
      }
      service_queries();  // a peer that timed out too is asking us
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::ostringstream msg;
    msg << "dist: " << op.work->description() << " on " << op.where << " did not finish within "
        << timeout_s_ << " s (dist.timeout_s) on world rank " << world_rank_ << " (" << host_
        << ")";
    std::vector<std::string> late, silent;
    for (size_t i = 0; i < n; ++i) {
      if (!answered[i]) {
        silent.push_back(std::to_string(op.waits_for[i]));
      } else if (op.seq > 0 && reached[i] < op.seq) {
        late.push_back(std::to_string(op.waits_for[i]) + " (last reached #" +
                       std::to_string(reached[i]) + ")");
      }
    }
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
      return s;
    };
    if (!late.empty()) msg << "; ranks that had not arrived: " << list(late);
    if (!silent.empty())
      msg << "; ranks that did not answer (stopped, hung or dead): " << list(silent);
    if (late.empty() && silent.empty())
      msg << (op.seq > 0 ? "; every member had arrived: the transfer itself is stuck"
                         : "; the peer is alive but has not posted the matching call");
    std::fprintf(stderr, "loom: error: %s\n", msg.str().c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
  }

  struct Reply {
    int64_t value;
    MPI_Request request;
  };

  std::atomic<double> timeout_s_;
  MPI_Comm diag_ = MPI_COMM_NULL;
  int world_rank_ = 0;
  std::string host_;
  int64_t query_in_ = 0;
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  std::list<Reply> replies_;  // stable addresses while their sends are in flight

  std::mutex entered_mutex_;
  std::vector<int64_t> entered_;  // per group id: sequence number of the last collective queued

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Op>> queue_;
  bool stopping_ = false;
  int abort_code_ = -1;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
  std::vector<bool> lane_busy_;  // the communication thread's own (see trace_begin)
  std::vector<int> lane_tids_;
};

std::unique_ptr<CommThread> g_thread;

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(std::string name, MPI_Comm comm, int rank, std::vector<int> world_ranks)
      : ProcessGroup(std::move(name), rank, std::move(world_ranks)),
        comm_(comm),
        group_id_(g_thread->new_group_id()) {}

  ~MpiGroup() override {
    if (g_thread && !g_thread->stopped() && comm_ != MPI_COMM_NULL) {
      MPI_Comm c = comm_;
      g_thread->run("free communicator of " + name(), [c]() mutable { MPI_Comm_free(&c); });
    }
  }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    check_reducible(t, op, "all_reduce");
    auto o = collective("all_reduce");
    o->bytes = int64_t(t.nbytes());
    count_sent(o->bytes, 2.0 * double(size() - 1) / double(size()));
    const int n = mpi_count(t.numel(), "all_reduce");
    const double divisor = op == ReduceOp::Avg ? double(size()) : 1.0;
    MPI_Comm comm = comm_;
    if (t.dtype() == DType::BF16) {
      auto buf = std::make_shared<Tensor>();
      o->start = [=](std::vector<MPI_Request>& r) {
        *buf = widened(t);
        r.resize(1);
        MPI_Iallreduce(MPI_IN_PLACE, buf->data_ptr(), n, MPI_FLOAT, mpi_op(op), comm, &r[0]);
      };
      o->complete = [=] { store_divided(*buf, t, divisor); };
    } else {
      o->start = [=](std::vector<MPI_Request>& r) {
        r.resize(1);
        MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), n, mpi_type(t.dtype()), mpi_op(op), comm, &r[0]);
      };
      if (divisor != 1) o->complete = [=] { store_divided(t, t, divisor); };
    }
    return g_thread->submit(std::move(o));
  }

  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_chunked(in, out, "reduce_scatter");
    check_reducible(in, op, "reduce_scatter");
    auto o = collective("reduce_scatter");
    o->bytes = int64_t(in.nbytes());
    count_sent(o->bytes, double(size() - 1) / double(size()));
    const int n = mpi_count(out.numel(), "reduce_scatter");
    const double divisor = op == ReduceOp::Avg ? double(size()) : 1.0;
    MPI_Comm comm = comm_;
    if (in.dtype() == DType::BF16) {
      auto wide_in = std::make_shared<Tensor>();
      auto wide_out = std::make_shared<Tensor>();
      o->start = [=](std::vector<MPI_Request>& r) {
        *wide_in = widened(in);
        *wide_out =
            Tensor::empty(out.shape(), DType::F32, out.device(), MemCategory::Communication);
        r.resize(1);
        MPI_Ireduce_scatter_block(wide_in->data_ptr(), wide_out->data_ptr(), n, MPI_FLOAT,
                                  mpi_op(op), comm, &r[0]);
      };
      o->complete = [=] { store_divided(*wide_out, out, divisor); };
    } else {
      o->start = [=](std::vector<MPI_Request>& r) {
        r.resize(1);
        MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), n, mpi_type(in.dtype()),
                                  mpi_op(op), comm, &r[0]);
      };
      if (divisor != 1) o->complete = [=] { store_divided(out, out, divisor); };
    }
    return g_thread->submit(std::move(o));
  }

  WorkPtr all_gather(const Tensor& in, const Tensor& out) override {
    check_chunked(out, in, "all_gather");
    auto o = collective("all_gather");
    o->bytes = int64_t(in.nbytes());
    count_sent(o->bytes, double(size() - 1));
    const int n = mpi_count(in.numel(), "all_gather");
    const MPI_Datatype type = mpi_type(in.dtype());
    MPI_Comm comm = comm_;
    // `in` may be this rank's chunk of `out` (an in-place gather, as ZeRO does).
    const bool in_place =
        in.data_ptr() == static_cast<char*>(out.data_ptr()) + size_t(rank()) * in.nbytes();
    o->start = [=](std::vector<MPI_Request>& r) {
      r.resize(1);
      MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data_ptr(), n, type, out.data_ptr(), n, type,
                     comm, &r[0]);
    };
    return g_thread->submit(std::move(o));
  }

  WorkPtr broadcast(const Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    check_peer(root, "broadcast");
    auto o = collective("broadcast");
    o->bytes = int64_t(t.nbytes());
    if (rank() == root) count_sent(o->bytes);
    const int n = mpi_count(t.numel(), "broadcast");
    const MPI_Datatype type = mpi_type(t.dtype());
    MPI_Comm comm = comm_;
    o->start = [=](std::vector<MPI_Request>& r) {
      r.resize(1);
      MPI_Ibcast(t.data_ptr(), n, type, root, comm, &r[0]);
    };
    return g_thread->submit(std::move(o));
  }

  WorkPtr all_to_all(const Tensor& in, const Tensor& out) override {
    check_tensor(in, "all_to_all");
    check_tensor(out, "all_to_all");
    LOOM_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() && in.numel() % size() == 0)
        << "all_to_all on group " << name() << ": in (" << in.numel() << " "
        << dtype_name(in.dtype()) << ") and out (" << out.numel() << " " << dtype_name(out.dtype())
        << ") must have the same dtype and a number of elements divisible by " << size();
    auto o = collective("all_to_all");
    o->bytes = int64_t(in.nbytes());
    count_sent(o->bytes, double(size() - 1) / double(size()));
    const int n = mpi_count(in.numel() / size(), "all_to_all");
    const MPI_Datatype type = mpi_type(in.dtype());
    MPI_Comm comm = comm_;
    o->start = [=](std::vector<MPI_Request>& r) {
      r.resize(1);
      MPI_Ialltoall(in.data_ptr(), n, type, out.data_ptr(), n, type, comm, &r[0]);
    };
    return g_thread->submit(std::move(o));
  }

  WorkPtr all_to_all_v(const Tensor& in, const std::vector<int64_t>& in_counts, const Tensor& out,
                       const std::vector<int64_t>& out_counts) override {
    check_tensor(in, "all_to_all_v");
    check_tensor(out, "all_to_all_v");
    LOOM_CHECK(in.dtype() == out.dtype())
        << "all_to_all_v on group " << name() << ": dtypes differ";
    LOOM_CHECK(int(in_counts.size()) == size() && int(out_counts.size()) == size())
        << "all_to_all_v on group " << name() << ": expected " << size() << " counts each, got "
        << in_counts.size() << " and " << out_counts.size();
    auto layout = std::make_shared<std::vector<int>>(4 * size_t(size()));
    int64_t in_total = 0, out_total = 0;
    for (int i = 0; i < size(); ++i) {
      LOOM_CHECK(in_counts[size_t(i)] >= 0 && out_counts[size_t(i)] >= 0)
          << "all_to_all_v on group " << name() << ": negative count";
      (*layout)[size_t(i)] = mpi_count(in_counts[size_t(i)], "all_to_all_v");
      (*layout)[size_t(size() + i)] = mpi_count(in_total, "all_to_all_v");
      (*layout)[size_t(2 * size() + i)] = mpi_count(out_counts[size_t(i)], "all_to_all_v");
      (*layout)[size_t(3 * size() + i)] = mpi_count(out_total, "all_to_all_v");
      in_total += in_counts[size_t(i)];
      out_total += out_counts[size_t(i)];
    }
    LOOM_CHECK(in_total <= in.numel() && out_total <= out.numel())
        << "all_to_all_v on group " << name() << ": counts sum to " << in_total << " sent and "
        << out_total << " received, tensors hold " << in.numel() << " and " << out.numel();
    auto o = collective("all_to_all_v");
    o->bytes = int64_t(in.nbytes());
    count_sent((in_total - in_counts[size_t(rank())]) * int64_t(dtype_size(in.dtype())));
    const MPI_Datatype type = mpi_type(in.dtype());
    const int p = size();
    MPI_Comm comm = comm_;
    o->start = [=](std::vector<MPI_Request>& r) {
      r.resize(1);
      const int* l = layout->data();
      MPI_Ialltoallv(in.data_ptr(), l, l + p, type, out.data_ptr(), l + 2 * p, l + 3 * p, type,
                     comm, &r[0]);
    };
    return g_thread->submit(std::move(o));
  }

  WorkPtr send(const Tensor& t, int dst, int tag) override { return transfer(true, t, dst, tag); }
  WorkPtr recv(const Tensor& t, int src, int tag) override { return transfer(false, t, src, tag); }

  WorkPtr barrier() override {
    auto o = collective("barrier");
    MPI_Comm comm = comm_;
    o->start = [=](std::vector<MPI_Request>& r) {
      r.resize(1);
      MPI_Ibarrier(comm, &r[0]);
    };
    return g_thread->submit(std::move(o));
  }

  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& new_name) override {
    LOOM_CHECK(color >= 0) << "split of group " << name() << ": color " << color
                           << " (expected >= 0)";
    MPI_Comm parent = comm_, child = MPI_COMM_NULL;
    int child_rank = 0, child_size = 0;
    std::vector<int> members;
    g_thread->run("split of group " + name() + " into " + new_name, [&] {
      MPI_Comm_split(parent, color, key, &child);
      MPI_Comm_rank(child, &child_rank);
      MPI_Comm_size(child, &child_size);
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      members.resize(size_t(child_size));
      MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, child);
    });
    return std::make_shared<MpiGroup>(new_name, child, child_rank, members);
  }

 private:
  std::unique_ptr<Op> collective(const char* what) {
    auto o = std::make_unique<Op>();
    o->seq = ++seq_;
    o->group_id = group_id_;
    o->work = std::make_shared<Work>(std::string(what) + " #" + std::to_string(o->seq));
    o->kind = what;
    o->group = name();
    o->where = "group " + describe();
    for (int i = 0; i < size(); ++i)
      if (i != rank()) o->waits_for.push_back(world_ranks()[size_t(i)]);
    return o;
  }

  // A send to `peer` or a receive from it: checks, description and the nonblocking call.
  WorkPtr transfer(bool sending, const Tensor& t, int peer, int tag) {
    const char* what = sending ? "send" : "recv";
    check_tensor(t, what);
    check_peer(peer, what);
    LOOM_CHECK(peer != rank()) << what << " on group " << name() << (sending ? ": to" : ": from")
                               << " itself";
    LOOM_CHECK(tag >= 0 && tag < 32768)
        << what << " on group " << name() << ": tag " << tag << " (expected 0 <= tag < 32768)";
    auto o = std::make_unique<Op>();
    o->group_id = group_id_;
    o->kind = what;
    o->bytes = int64_t(t.nbytes());
    if (sending) count_sent(o->bytes);
    o->group = name();
    o->work = std::make_shared<Work>(std::string(what) + (sending ? " to" : " from") + " rank " +
                                     std::to_string(peer) + " (tag " + std::to_string(tag) + ")");
    o->where = "group " + describe();
    o->waits_for.push_back(world_ranks()[size_t(peer)]);
    const int n = mpi_count(t.numel(), what);
    const MPI_Datatype type = mpi_type(t.dtype());
    MPI_Comm comm = comm_;
    o->start = [=](std::vector<MPI_Request>& r) {
      r.resize(1);
      if (sending) {
        MPI_Isend(t.data_ptr(), n, type, peer, tag, comm, &r[0]);
      } else {
        MPI_Irecv(t.data_ptr(), n, type, peer, tag, comm, &r[0]);
      }
    };
    return g_thread->submit(std::move(o));
  }

  MPI_Comm comm_;
  int group_id_;
  std::atomic<int64_t> seq_{0};
};

}  // namespace

std::shared_ptr<ProcessGroup> mpi_start_world(double timeout_s) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  LOOM_CHECK(provided >= MPI_THREAD_SERIALIZED)
      << "dist: the MPI library gives thread level " << provided
      << ", Loom needs MPI_THREAD_SERIALIZED (its calls come from a communication thread)";
  MPI_Comm world_comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world_comm);
  int rank = 0, size = 0;
  MPI_Comm_rank(world_comm, &rank);
  MPI_Comm_size(world_comm, &size);
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[size_t(i)] = i;
  g_thread = std::make_unique<CommThread>(timeout_s);
  return std::make_shared<MpiGroup>("world", world_comm, rank, members);
}

void mpi_set_timeout(double timeout_s) {
  if (g_thread) g_thread->set_timeout(timeout_s);
}

void mpi_stop_world() {
  if (!g_thread) return;
  g_thread->stop();
  MPI_Finalize();
}

void mpi_abort(int code) {
  if (g_thread && !g_thread->stopped()) g_thread->abort(code);
  std::_Exit(code);
}

}  // namespace loom::dist
