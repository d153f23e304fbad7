#include "loom/parallel/ddp.h"

#include <cstring>

#include "loom/backend/backend.h"
#include "loom/core/error.h"

namespace loom::parallel {

namespace {

// Elements [at, at + n) of a bucket's flat buffer.
Tensor flat_range(const Tensor& flat, int64_t at, int64_t n) {
  return flat.as_strided({n}, {1}, flat.offset() + at);
}

// dst = src, both contiguous of one dtype and size: a memcpy on the host, a device copy on GPUs.
void copy_elements(const Tensor& src, const Tensor& dst) {
  if (dst.device() == cpu_device()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
  } else {
    backend_for(dst.device()).copy(src.as_strided({src.numel()}, {1}, src.offset()), dst);
  }
}

}  // namespace

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;    // indices into State::params
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    Tensor flat;                   // (numel) the packed gradients, then their average
    int64_t ready = 0;
    bool launched = false, stale = false;
    dist::WorkPtr work;
  };
  std::vector<Tensor> params;
  std::vector<size_t> bucket_of;
  std::vector<bool> seen;
  std::vector<Bucket> buckets;
  std::shared_ptr<dist::ProcessGroup> group;
  bool sync = true, active = true;

  void pack_and_launch(Bucket& b) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params[b.params[k]];
      Tensor g = p.grad();
      const Tensor dst = flat_range(b.flat, b.offsets[k], p.numel());
      if (g.defined()) {
        LOOM_CHECK(g.is_contiguous() && g.dtype() == p.dtype())
            << "ddp: gradient of a parameter of shape " << p.shape() << " is not contiguous "
            << dtype_name(p.dtype());
        copy_elements(g, dst);
      } else {
        backend_for(dst.device()).fill(dst, 0.0);  // unused this step: contributes zero
      }
    }
    b.work = group->all_reduce(b.flat, dist::ReduceOp::Avg);
    b.launched = true;
  }

  void on_gradient(size_t index) {
    if (!active || !sync) return;
    Bucket& b = buckets[bucket_of[index]];
    if (b.launched) {
      b.stale = true;  // accumulated again after the bucket left
      return;
    }
    if (seen[index]) return;
    seen[index] = true;
    if (++b.ready == int64_t(b.params.size())) pack_and_launch(b);
  }
};

DistributedDataParallel::DistributedDataParallel(const std::vector<nn::NamedParameter>& params,
                                                 std::shared_ptr<dist::ProcessGroup> group,
                                                 int64_t bucket_bytes)
    : group_(std::move(group)), state_(std::make_shared<State>()) {
  LOOM_CHECK(bucket_bytes > 0) << "ddp: bucket size must be positive, got " << bucket_bytes;
  State& s = *state_;
  s.group = group_;
  for (const auto& p : params) s.params.push_back(p.tensor);
  s.bucket_of.resize(s.params.size());
  s.seen.assign(s.params.size(), false);
  // Reverse order; a new bucket when the current one is full or the dtype changes.
  int64_t bytes = 0;
  for (size_t i = s.params.size(); i-- > 0;) {
    const Tensor& p = s.params[i];
    const bool fresh = s.buckets.empty() || bytes >= bucket_bytes ||
                       s.params[s.buckets.back().params.front()].dtype() != p.dtype();
    if (fresh) {
      s.buckets.emplace_back();
      bytes = 0;
    }
    State::Bucket& b = s.buckets.back();
    b.offsets.push_back(b.params.empty() ? 0
                                         : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(i);
    s.bucket_of[i] = s.buckets.size() - 1;
    bytes += int64_t(p.nbytes());
  }
  for (auto& b : s.buckets) {
    const Tensor& last = s.params[b.params.back()];
    b.flat = Tensor::empty({b.offsets.back() + last.numel()}, last.dtype(), last.device(),
                           MemCategory::Communication);
  }
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i].add_post_accumulate_hook([weak, i](const Tensor&) {
      if (auto st = weak.lock()) st->on_gradient(i);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  state_->active = false;
}

int64_t DistributedDataParallel::num_buckets() const {
  return int64_t(state_->buckets.size());
}

void DistributedDataParallel::broadcast_parameters(int root) {
  std::vector<dist::WorkPtr> works;
  for (const Tensor& p : state_->params) works.push_back(group_->broadcast(p, root));
  for (auto& w : works) w->wait();
}

void DistributedDataParallel::set_gradient_sync(bool sync) {
  state_->sync = sync;
}

void DistributedDataParallel::finish_gradient_sync() {
  State& s = *state_;
  LOOM_CHECK(s.sync) << "ddp: finish_gradient_sync with gradient sync off (a no-sync micro-step)";
  // Buckets are launched in index order where backward left them unlaunched or stale, so every
  // rank issues the same all-reduces in the same order.
  for (auto& b : s.buckets) {
    if (b.launched && b.stale) {
      b.work->wait();
      b.launched = false;
    }
    if (!b.launched) s.pack_and_launch(b);
  }
  for (auto& b : s.buckets) {
    b.work->wait();
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = s.params[b.params[k]];
      Tensor g = p.grad();
      if (!g.defined()) {
        g = Tensor::empty(p.shape(), p.dtype(), p.device(), MemCategory::Gradients);
        p.set_grad(g);
      }
      copy_elements(flat_range(b.flat, b.offsets[k], p.numel()),
                    g.as_strided({g.numel()}, {1}, g.offset()));
    }
    b.ready = 0;
    b.launched = b.stale = false;
    b.work.reset();
  }
  s.seen.assign(s.params.size(), false);
}

}  // namespace loom::parallel
