#include "loom/nn/module.h"

#include <algorithm>
#include <cmath>

#include "loom/autograd/node.h"
#include "loom/core/trace.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"

namespace loom::nn {

Tensor Module::register_parameter(const std::string& name, const Shape& shape, Init init,
                                  bool weight_decay) {
  for (const Param& p : params_)
    LOOM_CHECK(p.name != name) << "module: parameter '" << name << "' registered twice";
  Tensor t = Tensor::empty(shape, DType::F32, cpu_device(), MemCategory::Parameters);
  t.set_requires_grad(true);
  params_.push_back(Param{name, t, init, weight_decay});
  return t;
}

void Module::to(Device device) {
  MemCategoryScope scope(MemCategory::Parameters);
  for (const NamedParameter& p : named_parameters())
    p.tensor.rebind_storage(detail::raw_to_device(p.tensor.detach(), device));
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

void Module::collect(const std::string& prefix, std::vector<NamedParameter>& out,
                     std::vector<const Param*>* params) const {
  for (const Param& p : params_) {
    out.push_back(NamedParameter{prefix + p.name, p.tensor, p.weight_decay});
    if (params) params->push_back(&p);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, params);
}

std::vector<NamedParameter> Module::named_parameters() const {
  std::vector<NamedParameter> out;
  collect("", out, nullptr);
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

void Module::init_parameters(uint64_t seed) {
  std::vector<NamedParameter> named;
  std::vector<const Param*> params;
  collect("", named, &params);
  NoGradGuard no_grad;
  for (size_t i = 0; i < named.size(); ++i) {
    const Init& init = params[i]->init;
    const Tensor& t = named[i].tensor;
    const RngKey key{seed, "init", named[i].name};
    switch (init.kind) {
      case Init::Normal:
        fill_normal(t, key, 0, init.a, init.b);
        break;
      case Init::Uniform:
        fill_uniform(t, key, 0, init.a, init.b);
        break;
      case Init::XavierUniform: {
        LOOM_CHECK(t.dim() == 2) << "xavier init of '" << named[i].name
                                 << "' needs a 2-D shape, got " << t.shape();
        const float bound = std::sqrt(6.0f / float(t.size(0) + t.size(1)));
        fill_uniform(t, key, 0, -bound, bound);
        break;
      }
      case Init::Zeros:
        fill_(t, 0.0);
        break;
      case Init::Ones:
        fill_(t, 1.0);
        break;
    }
  }
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
