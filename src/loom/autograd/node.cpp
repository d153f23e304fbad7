#include "loom/autograd/node.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "loom/backend/backend.h"

namespace loom {

namespace {
thread_local bool t_grad_enabled = true;
thread_local const char* t_trace_module = nullptr;
thread_local DType t_autocast = DType::F32;
std::atomic<uint64_t> g_next_sequence_nr{0};
}  // namespace

bool grad_mode_enabled() {
  return t_grad_enabled;
}
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = previous_;
}
EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) {
  t_grad_enabled = true;
}
EnableGradGuard::~EnableGradGuard() {
  t_grad_enabled = previous_;
}

DType autocast_dtype() {
  return t_autocast;
}
// The parameters' bf16 copies of the open bf16 regions (usually one: the training thread's).
// Shared by all threads, since ZeRO-3 may forget a copy from a communication thread.
struct ParameterCopy {
  std::weak_ptr<Storage> storage;  // the parameter's when copied: a rebound one is copied again
  const void* data = nullptr;
  Tensor copy;
};
struct ParameterCopies {
  std::mutex mutex;
  int open_regions = 0;
  std::unordered_map<const void*, ParameterCopy> by_param;  // TensorImpl address
};
ParameterCopies& parameter_copies() {
  static ParameterCopies copies;
  return copies;
}

AutocastGuard::AutocastGuard(DType compute)
    : previous_(t_autocast), opens_region_(compute == DType::BF16) {
  LOOM_CHECK(compute == DType::F32 || compute == DType::BF16)
      << "autocast: compute dtype must be f32 or bf16, got " << dtype_name(compute);
  t_autocast = compute;
  if (opens_region_) {
    ParameterCopies& c = parameter_copies();
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.open_regions;
  }
}
AutocastGuard::~AutocastGuard() {
  t_autocast = previous_;
  if (opens_region_) {
    ParameterCopies& c = parameter_copies();
    std::unordered_map<const void*, ParameterCopy> dropped;  // freed outside the lock
    std::lock_guard<std::mutex> lock(c.mutex);
    if (--c.open_regions == 0) dropped.swap(c.by_param);
  }
}

Tensor bf16_copy_of(const Tensor& t) {
  auto make = [&] {
    Tensor out = Tensor::empty(t.shape(), DType::BF16, t.device());
    backend_for(t.device()).copy(t, out);
    return out;
  };
  if (t.dtype() == DType::BF16) return t;
  if (!t.is_leaf() || !t.requires_grad()) return make();
  ParameterCopies& c = parameter_copies();
  std::unique_lock<std::mutex> lock(c.mutex);
  if (c.open_regions == 0) return make();
  auto found = c.by_param.find(t.impl_ptr().get());
  if (found != c.by_param.end() && found->second.data == t.raw_ptr() &&
      found->second.storage.lock() == t.storage() && found->second.copy.shape() == t.shape())
    return found->second.copy;
  lock.unlock();  // the copy itself runs unlocked
  Tensor copy = make();
  lock.lock();
  c.by_param[t.impl_ptr().get()] = ParameterCopy{t.storage(), t.raw_ptr(), copy};
  return copy;
}

void forget_bf16_copy(const Tensor& param) {
  ParameterCopies& c = parameter_copies();
  Tensor dropped;  // freed outside the lock
  std::lock_guard<std::mutex> lock(c.mutex);
  auto found = c.by_param.find(param.impl_ptr().get());
  if (found == c.by_param.end()) return;
  dropped = found->second.copy;
  c.by_param.erase(found);
}

const char* current_trace_module() {
  return t_trace_module;
}
TraceModuleScope::TraceModuleScope(const char* module) : previous_(t_trace_module) {
  t_trace_module = module;
}
TraceModuleScope::~TraceModuleScope() {
  t_trace_module = previous_;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge edge_of(const Tensor& t) {
  Edge e;
  if (!t.defined() || !t.requires_grad()) return e;
  if (t.grad_fn()) {
    e.node = t.grad_fn();
    e.output_nr = t.output_nr();
  } else {
    e.leaf = t.impl_ptr();
  }
  return e;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, bool always) {
  if (!t_grad_enabled || !(always || any_requires_grad(inputs))) return;
  node->inputs.clear();
  for (const Tensor& t : inputs) node->inputs.push_back(edge_of(t));
  node->num_outputs = uint32_t(outputs.size());
  node->sequence_nr = g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed);
  node->trace_module = t_trace_module;
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i].set_grad_fn(node, uint32_t(i));
}

}  // namespace loom
