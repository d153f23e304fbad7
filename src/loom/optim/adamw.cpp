#include "loom/optim/adamw.h"

#include <cmath>

#include "loom/backend/backend.h"
#include "loom/core/ordered_worker.h"
#include "loom/core/trace.h"
#include "loom/ops/ops.h"
#include "loom/optim/muon.h"

namespace loom::optim {

namespace {
void check_config(const AdamWConfig& config) {
  LOOM_CHECK(config.lr >= 0 && config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 &&
             config.beta2 < 1 && config.eps > 0 && config.weight_decay >= 0)
      << "adamw: bad hyper-parameters (lr " << config.lr << ", betas " << config.beta1 << ", "
      << config.beta2 << ", eps " << config.eps << ", weight_decay " << config.weight_decay << ")";
  LOOM_CHECK(!config.muon ||
             (config.muon_momentum >= 0 && config.muon_momentum < 1 && config.muon_steps > 0))
      << "muon: momentum must be in [0, 1) and steps positive, got " << config.muon_momentum
      << " and " << config.muon_steps;
}
void check_param(const nn::NamedParameter& p) {
  LOOM_CHECK(p.tensor.dtype() == DType::F32 && p.tensor.is_contiguous())
      << "adamw: parameter '" << p.name << "' must be contiguous f32 (master weights)";
}
}  // namespace

AdamW::AdamW(std::vector<nn::NamedParameter> params, AdamWConfig config) : config_(config) {
  check_config(config);
  MemCategoryScope scope(MemCategory::OptimizerState);
  for (auto& p : params) {
    check_param(p);
    const Device where = config.offload ? cpu_device() : p.tensor.device();
    slots_.push_back(Slot{p,
                          zeros(p.tensor.shape(), DType::F32, where),
                          zeros(p.tensor.shape(), DType::F32, where),
                          config.muon && muon_updates(p.name, p.tensor.shape()),
                          {},
                          {},
                          {}});
  }
}

AdamW::AdamW(std::vector<nn::NamedParameter> params, std::vector<Tensor> exp_avg,
             std::vector<Tensor> exp_avg_sq, AdamWConfig config)
    : config_(config) {
  check_config(config);
  LOOM_CHECK(exp_avg.size() == params.size() && exp_avg_sq.size() == params.size())
      << "adamw: " << params.size() << " parameters but " << exp_avg.size() << " and "
      << exp_avg_sq.size() << " moments";
  for (size_t i = 0; i < params.size(); ++i) {
    check_param(params[i]);
    LOOM_CHECK(exp_avg[i].shape() == params[i].tensor.shape() &&
               exp_avg_sq[i].shape() == params[i].tensor.shape())
        << "adamw: moments of '" << params[i].name << "' do not have its shape";
    // Pieces of parameters (ZeRO's shards) are not whole matrices: Muon needs them whole.
    const bool muon = config.muon && muon_updates(params[i].name, params[i].tensor.shape());
    slots_.push_back(Slot{params[i], exp_avg[i], exp_avg_sq[i], muon, {}, {}, {}});
  }
}

AdamW::AdamW(const nn::OptimizerParams& params, AdamWConfig config)
    : AdamW(params.params, params.exp_avg, params.exp_avg_sq, config) {
  if (!params.pieces.empty() && config.muon) {
    LOOM_CHECK(params.pieces.size() == slots_.size() && params.gather_wholes)
        << "adamw: " << params.pieces.size() << " pieces for " << slots_.size() << " parameters";
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].piece = params.pieces[i];
      slots_[i].muon = muon_updates(params.pieces[i].name, params.pieces[i].shape);
    }
    gather_wholes_ = params.gather_wholes;
    LOOM_CHECK(params.deferred.empty())
        << "muon: updates deferred to a host thread (ZeRO-3 offloaded) are not built for Muon";
  }
  if (params.deferred.empty()) return;
  LOOM_CHECK(params.deferred.size() == slots_.size())
      << "adamw: " << params.deferred.size() << " deferred updates for " << slots_.size()
      << " parameters";
  MemCategoryScope scope(MemCategory::Gradients);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    s.deferred = params.deferred[i];
    if (!s.deferred.worker) continue;
    LOOM_CHECK(s.param.tensor.device().type == DeviceType::CPU &&
               s.exp_avg.device().type == DeviceType::CPU)
        << "adamw: a deferred update of '" << s.param.name
        << "' runs on the host: the parameter and its moments must be in host memory";
    s.host_grad = Tensor::empty(s.param.tensor.shape(), DType::F32, cpu_device());
  }
}

AdamW::~AdamW() {
  try {
    settle();
  } catch (const std::exception&) {  // the error went to whoever waited first
  }
}

void AdamW::settle() const {
  for (const Slot& s : slots_)
    if (s.deferred.worker) s.deferred.worker->wait_all();
}

Tensor AdamW::muon_momentum(Slot& s, const Tensor& g, double grad_scale) const {
  const double mu = config_.muon_momentum;
  backend_for(g.device()).axpby(s.exp_avg, g, mu, grad_scale);       // m = mu m + g
  return add(mul_scalar(g, grad_scale), mul_scalar(s.exp_avg, mu));  // Nesterov: g + mu m
}

void AdamW::apply_muon(const Slot& s, const Tensor& w, const Tensor& o, const Shape& whole,
                       double lr) const {
  const double wd = s.param.weight_decay ? config_.weight_decay : 0.0;
  const double scale = 0.2 * std::sqrt(double(std::max(whole[0], whole[1])));
  backend_for(w.device()).axpby(w, o, 1.0 - lr * wd, -lr * scale);
}

void AdamW::update(Slot& s, const Tensor& g, double lr, double grad_scale, int64_t step) const {
  const double wd = s.param.weight_decay ? config_.weight_decay : 0.0;
  const Tensor& w = s.param.tensor;
  if (s.muon) {  // a whole matrix, updated where its momentum is
    MemCategoryScope scope(MemCategory::Communication);
    const Device where = s.exp_avg.device();
    const Tensor w_here = w.device() == where ? w : to_device(w, where);
    const Tensor ahead =
        muon_momentum(s, g.device() == where ? g : to_device(g, where), grad_scale);
    apply_muon(s, w_here, newton_schulz_orthogonalize(ahead, config_.muon_steps), w.shape(), lr);
    if (!w_here.is_same(w)) copy_(w, w_here);
    return;
  }
  if (s.exp_avg.device() == w.device()) {
    // A master apart from its gradient (ZeRO-1/2 offloaded: the master and moments on the
    // host, the reduced gradients on the device) takes a copy of it.
    MemCategoryScope scope(MemCategory::Communication);
    const Tensor g_here = g.device() == w.device() ? g : to_device(g, w.device());
    backend_for(w.device())
        .adamw_step(w, g_here, s.exp_avg, s.exp_avg_sq, lr, config_.beta1, config_.beta2,
                    config_.eps, wd, step, grad_scale);
    return;
  }
  // Offloaded: the update runs where the moments are, on copies of the weight and gradient.
  MemCategoryScope scope(MemCategory::Communication);
  const Tensor w_here = to_device(w, s.exp_avg.device());
  backend_for(s.exp_avg.device())
      .adamw_step(w_here, to_device(g, s.exp_avg.device()), s.exp_avg, s.exp_avg_sq, lr,
                  config_.beta1, config_.beta2, config_.eps, wd, step, grad_scale);
  copy_(w, w_here);
}

void AdamW::muon_pieces_step(double lr, double grad_scale) {
  std::vector<Tensor> ahead(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Tensor g = slots_[i].param.tensor.grad();
    if (slots_[i].muon && g.defined()) ahead[i] = muon_momentum(slots_[i], g, grad_scale);
  }
  // Collective: every rank asks for the same parameters' wholes, whatever pieces it holds.
  const std::vector<Tensor> wholes = gather_wholes_(
      ahead, [](const std::string& name, const Shape& shape) { return muon_updates(name, shape); });
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!ahead[i].defined()) continue;
    const nn::PieceOfParameter& p = slots_[i].piece;
    const Tensor o = newton_schulz_orthogonalize(contiguous(wholes[i]), config_.muon_steps);
    apply_muon(slots_[i], slots_[i].param.tensor,
               contiguous(narrow(reshape(o, {-1}), 0, p.begin, p.end - p.begin)), p.shape, lr);
  }
}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  NoGradGuard no_grad;
  if (gather_wholes_) muon_pieces_step(lr, grad_scale);
  for (Slot& s : slots_) {
    Tensor g = s.param.tensor.grad();
    if (!g.defined() || (s.muon && gather_wholes_)) continue;
    if (!s.deferred.worker) {
      update(s, g, lr, grad_scale, step_);
      continue;
    }
    // The gradient is copied now (the owner clears its buffer before the next backward); the
    // update runs on the worker, all of it in host memory, while the owner goes on.
    copy_(s.host_grad, g);
    Slot* slot = &s;  // slots_ never moves after construction
    s.deferred.worker->post(s.deferred.key, [this, slot, lr, grad_scale, step = step_] {
      trace::Scope scope("adamw_host", "optimizer");
      update(*slot, slot->host_grad, lr, grad_scale, step);
    });
  }
}

void AdamW::zero_grad() {
  for (Slot& s : slots_) s.param.tensor.set_grad(Tensor());
}

std::vector<std::pair<std::string, Tensor>> AdamW::named_state() const {
  settle();  // a reader sees the moments of the last step
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Slot& s : slots_) {
    out.emplace_back(s.param.name + ".exp_avg", s.exp_avg);
    out.emplace_back(s.param.name + ".exp_avg_sq", s.exp_avg_sq);
  }
  return out;
}

std::unique_ptr<AdamW> make_adamw(const OptimizerParams& p, const AdamWConfig& config) {
  if (p.exp_avg.empty()) return std::make_unique<AdamW>(p.params, config);
  return std::make_unique<AdamW>(p, config);
}

double grad_sum_squares(const std::vector<Tensor>& grads, const std::vector<double>& weights) {
  return sum_squares(grads, weights);
}

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm || !std::isfinite(norm)) return 1.0;
  return max_norm / (norm + 1e-6);
}

void scale_grads_to_norm(const std::vector<Tensor>& grads, double norm, double max_norm) {
  const double scale = clip_scale(norm, max_norm);
  if (scale == 1.0) return;
  for (const Tensor& g : grads)
    if (g.defined()) backend_for(g.device()).axpby(g, g, scale, 0.0);
}

double grad_norm(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  return std::sqrt(grad_sum_squares(grads));
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = grad_norm(params);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  scale_grads_to_norm(grads, norm, max_norm);
  return norm;
}

}  // namespace loom::optim
