#include "loom/nn/module.h"

#include <algorithm>
#include <cmath>

#include "loom/autograd/node.h"
#include "loom/core/trace.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"

namespace loom::nn {

namespace {
thread_local bool deferring = false;
}  // namespace

DeferInit::DeferInit() : outer_(deferring) {
  deferring = true;
}
DeferInit::~DeferInit() {
  deferring = outer_;
}

std::vector<ElementRun> compose_runs(const std::vector<ElementRun>& outer,
                                     const std::vector<ElementRun>& inner) {
  std::vector<ElementRun> out;
  for (const ElementRun& o : outer)
    for (const ElementRun& i : inner) {
      // o maps its part's [o.local, +o.length) to the middle part's [o.whole, +o.length); i
      // maps the middle part's [i.local, +i.length) to the whole.
      const int64_t lo = std::max(o.whole, i.local);
      const int64_t hi = std::min(o.whole + o.length, i.local + i.length);
      if (lo < hi) out.push_back({o.local + (lo - o.whole), i.whole + (lo - i.local), hi - lo});
    }
  std::sort(out.begin(), out.end(),
            [](const ElementRun& a, const ElementRun& b) { return a.local < b.local; });
  return out;
}

void fill_initial(const Tensor& dst, const ParameterInit& p, const std::vector<ElementRun>& runs,
                  int64_t local_begin) {
  LOOM_CHECK(dst.is_contiguous()) << "fill_initial: " << p.name << ": not contiguous";
  NoGradGuard no_grad;
  const Init& init = p.init;
  if (init.kind == Init::Zeros || init.kind == Init::Ones) {
    fill_(dst, init.kind == Init::Ones ? 1.0 : 0.0);
    return;
  }
  float a = init.a, b = init.b;
  if (init.kind == Init::XavierUniform) {
    LOOM_CHECK(p.whole_shape.size() == 2)
        << "xavier init of '" << p.name << "' needs a 2-D shape, got " << p.whole_shape;
    b = std::sqrt(6.0f / float(p.whole_shape[0] + p.whole_shape[1]));
    a = -b;
  }
  const RngKey key{p.seed, "init", p.name};
  const int64_t n = dst.numel();
  for (const ElementRun& r : runs) {
    const int64_t lo = std::max(r.local, local_begin);
    const int64_t hi = std::min(r.local + r.length, local_begin + n);
    if (lo >= hi) continue;
    const Tensor part = dst.as_strided({hi - lo}, {1}, dst.offset() + (lo - local_begin));
    const int64_t at = r.whole + (lo - r.local);
    if (init.kind == Init::Normal)
      fill_normal(part, key, at, a, b);
    else
      fill_uniform(part, key, at, a, b);
  }
}

Tensor Module::register_parameter(const std::string& name, const Shape& shape, Init init,
                                  bool weight_decay) {
  for (const Param& p : params_)
    LOOM_CHECK(p.name != name) << "module: parameter '" << name << "' registered twice";
  Tensor t = deferring
                 ? Tensor::unallocated(shape, DType::F32, cpu_device(), MemCategory::Parameters)
                 : Tensor::empty(shape, DType::F32, cpu_device(), MemCategory::Parameters);
  t.set_requires_grad(true);
  params_.push_back(Param{name, t, init, weight_decay});
  return t;
}

void Module::to(Device device) {
  MemCategoryScope scope(MemCategory::Parameters);
  for (const NamedParameter& p : named_parameters())
    p.tensor.rebind_storage(p.tensor.allocated()
                                ? detail::raw_to_device(p.tensor.detach(), device)
                                : Tensor::unallocated(p.tensor.shape(), p.tensor.dtype(), device,
                                                      MemCategory::Parameters));
  for_each_submodule([&](const std::string&, Module& m) {
    for (Tensor* b : m.buffers_)
      if (b->defined()) *b = detail::raw_to_device(*b, device);
  });
  for (Tensor* b : buffers_)
    if (b->defined()) *b = detail::raw_to_device(*b, device);
}

Device Module::device() const {
  const std::vector<NamedParameter> params = named_parameters();
  return params.empty() ? cpu_device() : params[0].tensor.device();
}

void Module::collect(const std::string& prefix, std::vector<NamedParameter>& out) const {
  for (const Param& p : params_)
    out.push_back(NamedParameter{prefix + p.name, p.tensor, p.weight_decay});
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<NamedParameter> Module::named_parameters() const {
  std::vector<NamedParameter> out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters()) out.push_back(p.tensor);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& p : named_parameters()) n += p.tensor.numel();
  return n;
}

void Module::for_each_param(const std::function<void(const std::string&, Param&)>& fn,
                            const std::string& prefix) {
  for (Param& p : params_) fn(prefix + p.name, p);
  for (auto& [name, child] : children_) child->for_each_param(fn, prefix + name + ".");
}

void Module::init_parameters(uint64_t seed) {
  for_each_param([&](const std::string& name, Param& p) {
    if (!p.tensor.allocated()) {
      p.deferred = true;
      p.seed = seed;
      return;
    }
    fill_initial(p.tensor, {name, p.tensor.shape(), p.init, seed}, {{0, 0, p.tensor.numel()}});
  });
}

std::map<std::string, ParameterInit> Module::take_deferred_inits() {
  std::map<std::string, ParameterInit> out;
  for_each_param([&](const std::string& name, Param& p) {
    if (!p.deferred) return;
    out.emplace(name, ParameterInit{name, p.tensor.shape(), p.init, p.seed});
    p.deferred = false;
  });
  return out;
}

void Module::set_training(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->set_training(training);
}

void Module::for_each_submodule(const std::function<void(const std::string&, Module&)>& fn,
                                const std::string& prefix) {
  for (auto& [name, child] : children_) {
    fn(prefix + name, *child);
    child->for_each_submodule(fn, prefix + name + ".");
  }
}

Module& Module::submodule(const std::string& path) const {
  // Child names may contain dots themselves ("blocks.3"): match whole name prefixes.
  const Module* m = this;
  std::string rest = path;
  while (!rest.empty()) {
    const Module* next = nullptr;
    size_t used = 0;
    for (const auto& [name, child] : m->children_)
      if (rest == name || rest.rfind(name + ".", 0) == 0) {
        next = child.get();
        used = name.size();
      }
    LOOM_CHECK(next) << "module has no submodule " << path;
    m = next;
    rest = rest.substr(std::min(rest.size(), used + 1));
  }
  return const_cast<Module&>(*m);
}

std::shared_ptr<Module> Module::remove_submodule(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      std::shared_ptr<Module> child = it->second;
      children_.erase(it);
      return child;
    }
  LOOM_FAIL() << "module has no submodule " << name << " to remove";
  return nullptr;
}

void Module::name_for_trace(const std::string& root) {
  trace_name_ = root;
  for (auto& [name, child] : children_)
    child->name_for_trace(root == "model" ? name : root + "." + name);
}

Tensor Module::call(const std::vector<Tensor>& inputs, const ForwardFn& fn) const {
  trace::Scope scope(trace_name_.empty() ? nullptr : trace_name_.c_str(), "forward");
  TraceModuleScope module(scope.active() ? trace_name_.c_str() : current_trace_module());
  // Wrapper i runs around wrappers 0..i-1, which run around fn.
  ForwardFn inner = fn;
  for (const auto& wrap : wrappers_)
    inner = [&wrap, inner](const std::vector<Tensor>& in) { return wrap(inner, in); };
  return inner(inputs);
}

}  // namespace loom::nn
