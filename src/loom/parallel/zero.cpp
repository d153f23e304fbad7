#include "loom/parallel/zero.h"

#include <cmath>
#include <cstring>

#include "loom/backend/backend.h"
#include "loom/core/error.h"

namespace loom::parallel {

std::vector<std::vector<nn::NamedParameter>> group_by_prefix(
    const std::vector<nn::NamedParameter>& params, const std::vector<std::string>& prefixes) {
  std::vector<std::vector<nn::NamedParameter>> groups(prefixes.size() + 1);
  for (const auto& p : params) {
    size_t g = prefixes.size();
    for (size_t i = 0; i < prefixes.size(); ++i)
      if (p.name.rfind(prefixes[i] + ".", 0) == 0) g = i;
    groups[g].push_back(p);
  }
  std::vector<std::vector<nn::NamedParameter>> out;
  for (auto& g : groups)
    if (!g.empty()) out.push_back(std::move(g));
  return out;
}

namespace {

Tensor zeros_of(int64_t n, MemCategory category) {
  Tensor t = Tensor::empty({n}, DType::F32, cpu_device(), category);
  std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

// Elements [at, at + n) of a flat f32 buffer as a tensor of `shape`.
Tensor flat_view(const Tensor& flat, int64_t at, const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return flat.as_strided(shape, strides, flat.offset() + at);
}

void add_into(const Tensor& acc, const Tensor& x) {
  float* a = acc.data<float>();
  const float* b = x.data<float>();
  for (int64_t i = 0; i < acc.numel(); ++i) a[i] += b[i];
}

}  // namespace

struct ZeroDataParallel::Group {
  std::vector<nn::NamedParameter> params;
  std::vector<int64_t> offsets;   // of each parameter in the flat buffers
  int64_t padded = 0, shard = 0;  // padded length (a multiple of the shard count), shard length S
  Tensor flat_param;              // (padded) the parameters; the model's tensors are views of it
  Tensor flat_grad;   // (padded) full gradients: stage 1 always; stage 2 while being reduced
  Tensor grad_shard;  // (S) the reduced gradients of the owned elements
  Tensor scratch;     // (S) stage 2: reduce-scatter output, added into grad_shard
  Tensor exp_avg, exp_avg_sq;  // (S) AdamW moments of the owned elements
  // Per backward:
  std::vector<bool> seen;
  int64_t ready = 0;
  bool launched = false, stale = false, harvested = false;
  dist::WorkPtr work;

  void bind_gradients() {
    for (size_t k = 0; k < params.size(); ++k)
      params[k].tensor.set_grad(flat_view(flat_grad, offsets[k], params[k].tensor.shape()));
  }
};

struct ZeroDataParallel::Shared {
  std::vector<Group> groups;
  std::shared_ptr<dist::ProcessGroup> shard;
  int stage = 1;
  bool sync = false, active = true;

  // Stage 1: the bound full gradients go straight into the shard. Stage 2: the parameters'
  // gradients are packed into a fresh flat buffer and dropped, and the result lands in
  // `scratch`, to be added into the shard (harvest) -- so a group's full gradients live only
  // from the end of its backward to the end of its reduce-scatter.
  void launch(Group& g) {
    if (stage == 2) {
      g.flat_grad = zeros_of(g.padded, MemCategory::Gradients);
      for (size_t k = 0; k < g.params.size(); ++k) {
        const Tensor& p = g.params[k].tensor;
        Tensor grad = p.grad();
        if (!grad.defined()) continue;  // unused this step: contributes zero
        LOOM_CHECK(grad.is_contiguous() && grad.dtype() == DType::F32)
            << "zero: gradient of " << g.params[k].name << " is not contiguous f32";
        std::memcpy(g.flat_grad.data<float>() + g.offsets[k], grad.data_ptr(), grad.nbytes());
        p.set_grad(Tensor());
      }
    }
    g.work = shard->reduce_scatter(g.flat_grad, stage == 2 ? g.scratch : g.grad_shard,
                                   dist::ReduceOp::Avg);
    g.launched = true;
    g.harvested = false;
  }

  void harvest(Group& g) {
    g.work->wait();
    if (stage == 2 && !g.harvested) {
      add_into(g.grad_shard, g.scratch);
      g.flat_grad = Tensor();
    }
    g.harvested = true;
  }

  void on_gradient(size_t gi, size_t k) {
    if (!active || !sync) return;
    Group& g = groups[gi];
    if (g.launched) {
      g.stale = true;  // accumulated again after the group left (a weight used twice)
      return;
    }
    if (g.seen[k]) return;
    g.seen[k] = true;
    if (++g.ready == int64_t(g.params.size())) launch(g);
    if (stage == 2)  // free what has arrived meanwhile
      for (auto& other : groups)
        if (other.launched && !other.harvested && other.work->completed()) harvest(other);
  }
};

ZeroDataParallel::ZeroDataParallel(const std::vector<std::vector<nn::NamedParameter>>& groups,
                                   int stage, std::shared_ptr<dist::ProcessGroup> shard,
                                   std::shared_ptr<dist::ProcessGroup> replicate,
                                   optim::AdamWConfig config)
    : stage_(stage),
      shard_(std::move(shard)),
      replicate_(std::move(replicate)),
      shared_(std::make_shared<Shared>()) {
  LOOM_CHECK(stage == 1 || stage == 2) << "zero: stage " << stage << " (expected 1 or 2)";
  shared_->shard = shard_;
  shared_->stage = stage;
  const int64_t P = shard_->size(), r = shard_->rank();
  std::vector<nn::NamedParameter> segments;
  std::vector<Tensor> m_views, v_views;
  for (const auto& params : groups) {
    Group g;
    g.params = params;
    int64_t total = 0;
    for (const auto& p : params) {
      LOOM_CHECK(p.tensor.dtype() == DType::F32 && p.tensor.is_contiguous())
          << "zero: parameter " << p.name << " must be contiguous f32";
      g.offsets.push_back(total);
      total += p.tensor.numel();
    }
    g.shard = (total + P - 1) / P;
    g.padded = g.shard * P;
    g.flat_param = zeros_of(g.padded, MemCategory::Parameters);
    for (size_t k = 0; k < params.size(); ++k) {
      const Tensor& p = params[k].tensor;
      Tensor view = flat_view(g.flat_param, g.offsets[k], p.shape());
      std::memcpy(view.data_ptr(), p.data_ptr(), p.nbytes());
      p.rebind_storage(view);
    }
    g.grad_shard = zeros_of(g.shard, MemCategory::Gradients);
    if (stage == 2) g.scratch = zeros_of(g.shard, MemCategory::Communication);
    g.exp_avg = zeros_of(g.shard, MemCategory::OptimizerState);
    g.exp_avg_sq = zeros_of(g.shard, MemCategory::OptimizerState);
    if (stage == 1) {
      g.flat_grad = zeros_of(g.padded, MemCategory::Gradients);
      g.bind_gradients();
    }
    g.seen.assign(params.size(), false);
    // The owned elements [lo, hi) of each parameter, as AdamW "parameters" of their own.
    const int64_t lo = r * g.shard, hi = lo + g.shard;
    for (size_t k = 0; k < params.size(); ++k) {
      const int64_t a = std::max(lo, g.offsets[k]);
      const int64_t b = std::min(hi, g.offsets[k] + params[k].tensor.numel());
      if (a >= b) continue;
      Tensor seg = flat_view(g.flat_param, a, {b - a});
      seg.set_grad(flat_view(g.grad_shard, a - lo, {b - a}));
      segments.push_back({params[k].name + "[" + std::to_string(a - g.offsets[k]) + ":" +
                              std::to_string(b - g.offsets[k]) + "]",
                          seg, params[k].weight_decay});
      m_views.push_back(flat_view(g.exp_avg, a - lo, {b - a}));
      v_views.push_back(flat_view(g.exp_avg_sq, a - lo, {b - a}));
    }
    shared_->groups.push_back(std::move(g));
  }
  optimizer_ = std::make_unique<optim::AdamW>(segments, m_views, v_views, config);
  std::weak_ptr<Shared> weak = shared_;
  for (size_t gi = 0; gi < shared_->groups.size(); ++gi)
    for (size_t k = 0; k < shared_->groups[gi].params.size(); ++k)
      shared_->groups[gi].params[k].tensor.add_post_accumulate_hook([weak, gi, k](const Tensor&) {
        if (auto s = weak.lock()) s->on_gradient(gi, k);
      });
}

ZeroDataParallel::~ZeroDataParallel() {
  shared_->active = false;
}

void ZeroDataParallel::broadcast_parameters() {
  for (auto* group : {&shard_, &replicate_}) {
    std::vector<dist::WorkPtr> works;
    for (auto& g : shared_->groups) works.push_back((*group)->broadcast(g.flat_param, 0));
    for (auto& w : works) w->wait();
  }
}

void ZeroDataParallel::begin_micro_step(int64_t micro, int64_t grad_accum) {
  // Stage 2 reduces every micro-step (into the shard); stage 1 only the last one's sum.
  shared_->sync = stage_ == 2 || micro + 1 == grad_accum;
}

void ZeroDataParallel::after_backward(int64_t micro, int64_t grad_accum) {
  Shared& s = *shared_;
  if (!s.sync) return;
  // Groups backward did not complete (unused parameters) or re-accumulated after they left
  // go now, in group order, the same on every rank. A stage-2 relaunch sends only the new
  // contributions (the earlier ones are in the shard already; reduce-scatter is linear); a
  // stage-1 relaunch sends the whole accumulated buffer again, overwriting the shard.
  for (auto& g : s.groups) {
    if (g.launched && g.stale) {
      s.harvest(g);
      g.launched = false;
    }
    if (!g.launched) s.launch(g);
  }
  for (auto& g : s.groups) {
    s.harvest(g);
    g.work.reset();
    g.ready = 0;
    g.launched = g.stale = g.harvested = false;
    g.seen.assign(g.params.size(), false);
  }
  if (micro + 1 == grad_accum && replicate_->size() > 1) {
    std::vector<dist::WorkPtr> works;
    for (auto& g : s.groups)
      works.push_back(replicate_->all_reduce(g.grad_shard, dist::ReduceOp::Avg));
    for (auto& w : works) w->wait();
  }
}

double ZeroDataParallel::clip_grad_norm(double max_norm) {
  double local = 0;
  for (auto& g : shared_->groups) {
    const float* x = g.grad_shard.data<float>();
    for (int64_t i = 0; i < g.shard; ++i) local += double(x[i]) * double(x[i]);
  }
  Tensor t = Tensor::empty({1});
  t.data<float>()[0] = float(local);
  shard_->all_reduce(t, dist::ReduceOp::Sum)->wait();
  const double norm = std::sqrt(double(t.data<float>()[0]));
  if (max_norm > 0 && norm > max_norm && std::isfinite(norm)) {
    const float scale = float(max_norm / (norm + 1e-6));
    for (auto& g : shared_->groups) {
      float* x = g.grad_shard.data<float>();
      for (int64_t i = 0; i < g.shard; ++i) x[i] *= scale;
    }
  }
  return norm;
}

void ZeroDataParallel::after_optimizer_step() {
  std::vector<dist::WorkPtr> works;
  for (auto& g : shared_->groups)
    works.push_back(shard_->all_gather(flat_view(g.flat_param, shard_->rank() * g.shard, {g.shard}),
                                       g.flat_param));
  for (auto& w : works) w->wait();
}

void ZeroDataParallel::zero_grad() {
  for (auto& g : shared_->groups) {
    std::memset(g.grad_shard.data_ptr(), 0, g.grad_shard.nbytes());
    if (g.flat_grad.defined()) std::memset(g.flat_grad.data_ptr(), 0, g.flat_grad.nbytes());
  }
}

std::vector<std::pair<std::string, Tensor>> ZeroDataParallel::full_optimizer_state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& g : shared_->groups) {
    Tensor m = Tensor::empty({g.padded}, DType::F32, cpu_device(), MemCategory::Communication);
    Tensor v = Tensor::empty({g.padded}, DType::F32, cpu_device(), MemCategory::Communication);
    auto wm = shard_->all_gather(g.exp_avg, m);
    auto wv = shard_->all_gather(g.exp_avg_sq, v);
    wm->wait();
    wv->wait();
    for (size_t k = 0; k < g.params.size(); ++k) {
      const Shape& shape = g.params[k].tensor.shape();
      out.emplace_back(g.params[k].name + ".exp_avg", flat_view(m, g.offsets[k], shape));
      out.emplace_back(g.params[k].name + ".exp_avg_sq", flat_view(v, g.offsets[k], shape));
    }
  }
  return out;
}

void ZeroDataParallel::load_full_optimizer_state(const std::map<std::string, Tensor>& state,
                                                 const std::string& source) {
  const int64_t r = shard_->rank();
  for (auto& g : shared_->groups) {
    const int64_t lo = r * g.shard, hi = lo + g.shard;
    for (size_t k = 0; k < g.params.size(); ++k) {
      const auto& p = g.params[k];
      for (auto [suffix, moments] :
           {std::pair{".exp_avg", &g.exp_avg}, {".exp_avg_sq", &g.exp_avg_sq}}) {
        auto it = state.find(p.name + suffix);
        LOOM_CHECK(it != state.end()) << source << ": no tensor " << p.name << suffix;
        const Tensor& t = it->second;
        LOOM_CHECK(t.shape() == p.tensor.shape() && t.dtype() == DType::F32 && t.is_contiguous())
            << source << ": " << p.name << suffix << " has shape " << t.shape() << " "
            << dtype_name(t.dtype()) << ", expected " << p.tensor.shape() << " f32";
        const int64_t a = std::max(lo, g.offsets[k]);
        const int64_t b = std::min(hi, g.offsets[k] + p.tensor.numel());
        if (a >= b) continue;
        std::memcpy(moments->data<float>() + (a - lo), t.data<float>() + (a - g.offsets[k]),
                    size_t(b - a) * sizeof(float));
      }
    }
  }
}

}  // namespace loom::parallel
