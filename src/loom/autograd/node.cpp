#include "loom/autograd/node.h"

#include <atomic>

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
AutocastGuard::AutocastGuard(DType compute) : previous_(t_autocast) {
  LOOM_CHECK(compute == DType::F32 || compute == DType::BF16)
      << "autocast: compute dtype must be f32 or bf16, got " << dtype_name(compute);
  t_autocast = compute;
}
AutocastGuard::~AutocastGuard() {
  t_autocast = previous_;
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
