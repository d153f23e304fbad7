#include "loom/dist/staged_group.h"

#include <utility>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/core/error.h"

namespace loom::dist {

namespace {

bool on_device(const Tensor& t) {
  return t.device().type != DeviceType::CPU;
}

// A host copy of a device tensor (its values when `values`, else only its shape: an output).
Tensor to_host(const Tensor& t, bool values) {
  LOOM_CHECK(t.is_contiguous()) << "staged group: tensors must be contiguous";
  Tensor h = Tensor::empty(t.shape(), t.dtype(), cpu_device(), MemCategory::Communication);
  if (values) backend_for(t.device()).copy(t, h);
  return h;
}

// After `work` finishes, when its caller waits: each host copy back into its device tensor.
// The host inputs live as long as the handle (whatever the host group keeps of them).
WorkPtr copy_back(WorkPtr work, std::vector<std::pair<Tensor, Tensor>> host_to_device,
                  std::vector<Tensor> inputs = {}) {
  work->on_wait([pairs = std::move(host_to_device), inputs = std::move(inputs)] {
    for (const auto& [host, device] : pairs) backend_for(device.device()).copy(host, device);
  });
  return work;
}

class StagedGroup final : public ProcessGroup {
 public:
  explicit StagedGroup(std::shared_ptr<ProcessGroup> host)
      : ProcessGroup(host->name(), host->rank(), host->world_ranks()), host_(std::move(host)) {}

  int64_t bytes_sent() const override { return host_->bytes_sent(); }  // the host group's wire

  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override {
    if (!on_device(t)) return host_->all_reduce(t, op);
    const Tensor h = to_host(t, true);
    return copy_back(host_->all_reduce(h, op), {{h, t}});
  }
  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    if (!on_device(in)) return host_->reduce_scatter(in, out, op);
    const Tensor hin = to_host(in, true), hout = to_host(out, false);
    return copy_back(host_->reduce_scatter(hin, hout, op), {{hout, out}}, {hin});
  }
  WorkPtr all_gather(const Tensor& in, const Tensor& out) override {
    if (!on_device(in)) return host_->all_gather(in, out);
    const Tensor hin = to_host(in, true), hout = to_host(out, false);
    return copy_back(host_->all_gather(hin, hout), {{hout, out}}, {hin});
  }
  WorkPtr broadcast(const Tensor& t, int root) override {
    if (!on_device(t)) return host_->broadcast(t, root);
    const Tensor h = to_host(t, rank() == root);
    return copy_back(host_->broadcast(h, root), {{h, t}});
  }
  WorkPtr all_to_all(const Tensor& in, const Tensor& out) override {
    if (!on_device(in)) return host_->all_to_all(in, out);
    const Tensor hin = to_host(in, true), hout = to_host(out, false);
    return copy_back(host_->all_to_all(hin, hout), {{hout, out}}, {hin});
  }
  WorkPtr all_to_all_v(const Tensor& in, const std::vector<int64_t>& in_counts, const Tensor& out,
                       const std::vector<int64_t>& out_counts) override {
    if (!on_device(in)) return host_->all_to_all_v(in, in_counts, out, out_counts);
    const Tensor hin = to_host(in, true), hout = to_host(out, false);
    return copy_back(host_->all_to_all_v(hin, in_counts, hout, out_counts), {{hout, out}}, {hin});
  }
  WorkPtr send(const Tensor& t, int dst, int tag) override {
    if (!on_device(t)) return host_->send(t, dst, tag);
    const Tensor h = to_host(t, true);
    return copy_back(host_->send(h, dst, tag), {}, {h});
  }
  WorkPtr recv(const Tensor& t, int src, int tag) override {
    if (!on_device(t)) return host_->recv(t, src, tag);
    const Tensor h = to_host(t, false);
    return copy_back(host_->recv(h, src, tag), {{h, t}});
  }
  WorkPtr barrier() override { return host_->barrier(); }
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    return staged_device_group(host_->split(color, key, name));
  }

 private:
  std::shared_ptr<ProcessGroup> host_;
};

}  // namespace

std::shared_ptr<ProcessGroup> staged_device_group(std::shared_ptr<ProcessGroup> host) {
  return std::make_shared<StagedGroup>(std::move(host));
}

}  // namespace loom::dist
