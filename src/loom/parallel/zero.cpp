#include "loom/parallel/zero.h"

#include <cmath>

#include "loom/autograd/backward_hook.h"
#include "loom/autograd/node.h"
#include "loom/backend/backend.h"
#include "loom/core/error.h"
#include "loom/core/hash.h"
#include "loom/core/ordered_worker.h"
#include "loom/ops/creation.h"

namespace loom::parallel {

namespace {

// The flat buffers live on the parameters' device (the host, or a GPU); every fill, copy and
// sum goes through that device's backend.
Tensor zeros_of(int64_t n, MemCategory category, Device device, DType dtype = DType::F32) {
  Tensor t = Tensor::empty({n}, dtype, device, category);
  backend_for(device).fill(t, 0.0);
  return t;
}

void fill_zero(const Tensor& t) {
  backend_for(t.device()).fill(t, 0.0);
}

// Elements [at, at + n) of a flat buffer as a tensor of `shape`.
Tensor flat_view(const Tensor& flat, int64_t at, const Shape& shape) {
  return flat.as_strided(shape, contiguous_strides(shape), flat.offset() + at);
}

void add_into(const Tensor& acc, const Tensor& x) {
  backend_for(acc.device()).binary(BinaryOp::Add, acc, x, acc);
}

// A copy (converting the dtype) within a device or between the host and a device: the device
// side's backend knows both kinds of memory.
void convert(const Tensor& from, const Tensor& to) {
  backend_for(to.device().type == DeviceType::CPU ? from.device() : to.device()).copy(from, to);
}

}  // namespace

struct ZeroDataParallel::Group {
  std::vector<nn::NamedParameter> params;
  std::vector<int64_t> offsets;   // of each parameter in the flat buffers
  int64_t padded = 0, shard = 0;  // padded length (a multiple of the shard count), shard length S
  bool wrapped = false;  // a unit whose forward is wrapped (else: the parameters of no unit)
  Tensor full;           // (padded) the parameters; the model's tensors are views of it
  // (S) the owned elements: a view of `full`, or a buffer of its own (stage 3; stages 1-2 with
  // the master offloaded from a device).
  Tensor master;
  // With the master in host memory (offloaded), the shard the gather sends, (S) in the gather
  // dtype on the device, behind the master while `upload` is set: stage 3's own buffer; under
  // stages 1-2 this rank's chunk of `full`, or of `kept`.
  Tensor working;
  bool upload = false;
  // Stages 1-2 offloaded with bf16 gathers, a unit's group: the (padded) parameters as the
  // device keeps them between uses (bf16). `full` then exists only while the unit runs, as
  // stage 3's does, converted from it instead of gathered.
  Tensor kept;
  size_t piece_begin = 0, piece_end = 0;  // its pieces in ZeroDataParallel::pieces()
  Tensor flat_grad;   // (padded) full gradients: stage 1 always; stages 2-3 while in flight
  Tensor grad_shard;  // (S) the reduced gradients of the owned elements
  Tensor scratch;     // (S) stages 2-3: reduce-scatter output while in flight
  Tensor exp_avg, exp_avg_sq;  // (S) AdamW moments of the owned elements
  // Stage 3: whether `full` holds the parameters.
  enum class Params { Released, Gathering, Ready } state = Params::Ready;
  dist::WorkPtr gather_work;
  Tensor gather_send, gather_recv;  // bf16 gathers: the wire buffers
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
  ZeroOptions options;
  Device device = cpu_device();  // the parameters'
  // Units' full parameters exist only while the unit runs (stage 3; stages 1-2 keeping bf16).
  bool released_between_uses = false;
  int last_unit = -1;
  bool sync = false, active = true;
  // Offloaded stage 3: where the optimizer posts each piece's update (keyed by piece index).
  std::shared_ptr<OrderedWorker> updates;

  // Stage 3: the group's shard as the gather sends it, once its pieces are updated.
  void settle(Group& g) {
    if (updates) updates->wait_keys(g.piece_begin, g.piece_end);
    if (g.upload) convert(g.master, g.working);
    g.upload = false;
  }
  const Tensor& gather_source(const Group& g) const {
    return g.working.defined() ? g.working : g.master;
  }

  // --- stage 3: the full parameters of a group ---
  void start_gather(Group& g) {
    settle(g);
    g.full.storage()->materialize();
    if (g.kept.defined()) {  // stages 1-2: every element is here already
      convert(g.kept, g.full);
      g.state = Group::Params::Ready;
      return;
    }
    const Tensor& source = gather_source(g);
    if (options.gather_dtype == DType::BF16) {
      Tensor send = source;
      if (send.dtype() != DType::BF16) {
        g.gather_send = Tensor::empty({g.shard}, DType::BF16, device, MemCategory::Communication);
        convert(source, g.gather_send);
        send = g.gather_send;
      }
      g.gather_recv = Tensor::empty({g.padded}, DType::BF16, device, MemCategory::Communication);
      g.gather_work = shard->all_gather(send, g.gather_recv);
    } else {
      g.gather_work = shard->all_gather(source, g.full);
    }
    g.state = Group::Params::Gathering;
  }

  void finish_gather(Group& g) {
    if (g.state == Group::Params::Released) start_gather(g);
    if (g.state != Group::Params::Gathering) return;
    g.gather_work->wait();
    if (g.gather_recv.defined()) convert(g.gather_recv, g.full);
    g.gather_send = g.gather_recv = Tensor();
    g.gather_work.reset();
    g.state = Group::Params::Ready;
  }

  void release(Group& g) {
    if (!released_between_uses || !g.wrapped || g.state == Group::Params::Released) return;
    if (g.state == Group::Params::Gathering) finish_gather(g);  // never free under a transfer
    for (const auto& p : g.params) forget_bf16_copy(p.tensor);  // its memory goes with it
    g.full.storage()->release();
    g.state = Group::Params::Released;
  }

  // The forward wrapper of unit group gi (stages 2 and 3).
  // user: the forward of another module using the unit's parameters (a tied output head),
  // which prefetches nothing.
  Tensor forward(size_t gi, const nn::Module::ForwardFn& fn, const std::vector<Tensor>& inputs,
                 const std::weak_ptr<Shared>& self, bool user) {
    Group& g = groups[gi];
    if (released_between_uses) {
      finish_gather(g);
      if (!user && gi + 1 < groups.size() && groups[gi + 1].wrapped &&
          groups[gi + 1].state == Group::Params::Released)
        start_gather(groups[gi + 1]);
    }
    Tensor out = fn(inputs);
    const bool backward_follows = grad_mode_enabled() && out.requires_grad();
    // The last unit stays gathered for its backward, which comes next.
    if (!(backward_follows && int(gi) == last_unit && !user)) release(g);
    if (!backward_follows) return out;
    return with_backward_hook(out, [self, gi] {
      if (auto s = self.lock()) s->pre_backward(gi);
    });
  }

  // Backward has reached unit gi's output: its parameters and a gradient buffer must exist.
  void pre_backward(size_t gi) {
    if (!active) return;
    Group& g = groups[gi];
    if (released_between_uses) {
      finish_gather(g);
      if (gi > 0 && groups[gi - 1].wrapped && groups[gi - 1].state == Group::Params::Released)
        start_gather(groups[gi - 1]);
    }
    if (sync && !g.launched && !g.flat_grad.defined()) {
      g.flat_grad = zeros_of(g.padded, MemCategory::Gradients, device);
      g.bind_gradients();
    }
  }

  // --- gradients ---
  // Stage 1: the bound full gradients go straight into the shard. Stages 2-3: the group's
  // flat buffer (bound at pre_backward, or packed here from the parameters' own gradients when
  // no hook bound it) is reduce-scattered into `scratch`, added into the shard at harvest.
  void launch(Group& g) {
    if (options.stage >= 2) {
      // One reduce-scatter in flight at a time: it has the next block's backward to finish
      // in, and full gradient buffers stay bounded at two (this group's and the next one's).
      for (auto& other : groups)
        if (other.launched && !other.harvested) harvest(other);
      if (!g.flat_grad.defined()) {
        g.flat_grad = zeros_of(g.padded, MemCategory::Gradients, device);
        for (size_t k = 0; k < g.params.size(); ++k) {
          Tensor grad = g.params[k].tensor.grad();
          if (!grad.defined()) continue;  // unused this step: contributes zero
          LOOM_CHECK(grad.is_contiguous() && grad.dtype() == DType::F32)
              << "zero: gradient of " << g.params[k].name << " is not contiguous f32";
          convert(grad, flat_view(g.flat_grad, g.offsets[k], grad.shape()));
        }
      }
      for (auto& p : g.params) p.tensor.set_grad(Tensor());
      g.scratch = Tensor::empty({g.shard}, DType::F32, device, MemCategory::Communication);
    }
    g.work = shard->reduce_scatter(g.flat_grad, options.stage >= 2 ? g.scratch : g.grad_shard,
                                   dist::ReduceOp::Avg);
    g.launched = true;
    g.harvested = false;
    release(g);  // stage 3: its backward is over
  }

  void harvest(Group& g) {
    g.work->wait();
    if (options.stage >= 2 && !g.harvested) {
      add_into(g.grad_shard, g.scratch);
      g.scratch = Tensor();
      g.flat_grad = Tensor();
    }
    g.harvested = true;
  }

  // OptimizerParams::gather_wholes over this instance's pieces (values aligned with them, and
  // perhaps more after them: another instance's). A group is gathered whole -- each rank's
  // shard of the values, zeros where it has none -- when any of its parameters is wanted.
  std::vector<Tensor> gather_wholes(
      const std::vector<Tensor>& values,
      const std::function<bool(const std::string&, const Shape&)>& wanted) {
    std::vector<Tensor> out(values.size());
    for (Group& g : groups) {
      bool any = false;
      for (const auto& p : g.params) any |= wanted(p.name, p.tensor.shape());
      if (!any) continue;
      const Tensor mine = zeros_of(g.shard, MemCategory::Communication, device);
      for (size_t i = g.piece_begin; i < g.piece_end && i < values.size(); ++i)
        if (values[i].defined())
          convert(values[i], flat_view(mine, piece_offset[i], {values[i].numel()}));
      const Tensor all = zeros_of(g.padded, MemCategory::Communication, device);
      shard->all_gather(mine, all)->wait();
      for (size_t i = g.piece_begin; i < g.piece_end && i < values.size(); ++i) {
        if (!values[i].defined()) continue;
        const size_t k = piece_param[i];
        out[i] = flat_view(all, g.offsets[k], g.params[k].tensor.shape());
      }
    }
    return out;
  }

  std::vector<int64_t> piece_offset;  // each piece's offset in its group's shard
  std::vector<size_t> piece_param;    // each piece's parameter in its group

  void on_gradient(size_t gi, size_t k) {
    if (!active) return;
    Group& g = groups[gi];
    if (!sync) {
      // Stage 1 between its reductions: a unit's backward is over once each of its parameters
      // has its gradient, and its full parameters go until the next use.
      if (released_between_uses && !g.seen[k]) {
        g.seen[k] = true;
        if (++g.ready == int64_t(g.params.size())) release(g);
      }
      return;
    }
    if (g.launched) {
      g.stale = true;  // accumulated again after the group left (a weight used twice)
      return;
    }
    if (g.seen[k]) return;
    g.seen[k] = true;
    if (++g.ready == int64_t(g.params.size())) launch(g);
    if (options.stage >= 2)  // free what has arrived meanwhile
      for (auto& other : groups)
        if (other.launched && !other.harvested && other.work->completed()) harvest(other);
  }
};

ZeroDataParallel::ZeroDataParallel(nn::Module& model, const std::vector<std::string>& unit_names,
                                   ZeroOptions options, std::shared_ptr<dist::ProcessGroup> shard,
                                   std::shared_ptr<dist::ProcessGroup> replicate)
    : shard_(std::move(shard)),
      replicate_(std::move(replicate)),
      shared_(std::make_shared<Shared>()) {
  const int stage = options.stage;
  LOOM_CHECK(stage >= 1 && stage <= 3) << "zero: stage " << stage << " (expected 1, 2 or 3)";
  shared_->shard = shard_;
  shared_->options = options;
  const Device device = model.named_parameters().empty()
                            ? cpu_device()
                            : model.named_parameters().front().tensor.device();
  shared_->device = device;
  const int64_t P = shard_->size(), r = shard_->rank();
  const bool offload = options.offload_optimizer;
  const Device host = cpu_device();
  // Offloaded: the master in host memory (stage 3's updated on a host thread). Stages 1-2 on
  // the host keep it a view of the parameters: there a copy would free nothing.
  const Device master_device = offload && (stage == 3 || device != host) ? host : device;
  if (stage == 3 && offload) shared_->updates = std::make_shared<OrderedWorker>();
  // Stages 1-2 with the master apart: the device's parameters are a copy of it, kept in the
  // gather dtype.
  const bool apart = stage < 3 && master_device != device;
  LOOM_CHECK(options.gather_dtype == DType::F32 ||
             (options.gather_dtype == DType::BF16 && (stage == 3 || apart)))
      << "zero: parameters are gathered in f32, or in bf16 under stage 3 or with the master "
         "offloaded from a device";
  shared_->released_between_uses = stage == 3 || (apart && options.gather_dtype == DType::BF16);

  // One group per unit (in forward order), then the rest.
  const auto params = model.named_parameters();
  std::vector<std::vector<nn::NamedParameter>> param_groups(unit_names.size() + 1);
  for (const auto& p : params) {
    if (options.skip.count(p.name)) continue;
    size_t gi = unit_names.size();
    for (size_t i = 0; i < unit_names.size(); ++i)
      if (p.name.rfind(unit_names[i] + ".", 0) == 0) gi = i;
    param_groups[gi].push_back(p);
  }
  for (size_t i = 0; i < unit_names.size(); ++i)
    LOOM_CHECK(!param_groups[i].empty()) << "zero: unit " << unit_names[i] << " has no parameters";

  auto& segments = optimizer_params_.params;
  auto& m_views = optimizer_params_.exp_avg;
  auto& v_views = optimizer_params_.exp_avg_sq;
  for (size_t gi = 0; gi < param_groups.size(); ++gi) {
    if (param_groups[gi].empty()) continue;
    Group g;
    g.params = param_groups[gi];
    g.wrapped = gi < unit_names.size();
    int64_t total = 0;
    for (const auto& p : g.params) {
      LOOM_CHECK(p.tensor.dtype() == DType::F32 && p.tensor.is_contiguous())
          << "zero: parameter " << p.name << " must be contiguous f32";
      g.offsets.push_back(total);
      total += p.tensor.numel();
    }
    g.shard = (total + P - 1) / P;
    g.padded = g.shard * P;
    const int64_t lo = r * g.shard, hi = lo + g.shard;
    // Stage 3 holds only its shard from the start: the full buffer has no memory until a
    // gather, and the shard is filled from each parameter's values (or its deferred init).
    // A unit kept in bf16 fills its full buffer once, to convert it.
    const bool keep = shared_->released_between_uses && stage < 3 && g.wrapped;
    g.full = stage == 3 || keep
                 ? Tensor::unallocated({g.padded}, DType::F32, device, MemCategory::Parameters)
                 : zeros_of(g.padded, MemCategory::Parameters, device);
    if (keep) {
      g.full.storage()->materialize();
      fill_zero(g.full);
    }
    if (stage == 3) {
      g.master = zeros_of(g.shard, MemCategory::Parameters, master_device);
      if (master_device != device) {
        g.working = zeros_of(g.shard, MemCategory::Parameters, device, options.gather_dtype);
        g.upload = true;
      }
    }
    for (size_t k = 0; k < g.params.size(); ++k) {
      const Tensor& p = g.params[k].tensor;
      const std::string& name = g.params[k].name;
      LOOM_CHECK(p.device() == device) << "zero: parameter " << name << " is on "
                                       << p.device().str() << ", the first on " << device.str();
      LOOM_CHECK(p.allocated() || options.initial_values)
          << "zero: parameter " << name << " has no values";
      const int64_t at = g.offsets[k];
      // What of it lands in `dst`: its elements [begin, begin + dst.numel()).
      auto fill = [&](const Tensor& dst, int64_t begin) {
        if (p.allocated())
          convert(p.as_strided(dst.shape(), {1}, p.offset() + begin), dst);
        else
          options.initial_values(name, dst, begin);
      };
      if (stage == 3) {
        const int64_t a = std::max(lo, at), b = std::min(hi, at + p.numel());
        if (a < b) fill(flat_view(g.master, a - lo, {b - a}), a - at);
      } else {
        fill(flat_view(g.full, at, {p.numel()}), 0);
      }
      p.rebind_storage(flat_view(g.full, at, p.shape()));
    }
    if (stage == 3) {
      g.state = Group::Params::Released;
    } else if (!apart) {
      g.master = flat_view(g.full, lo, {g.shard});
    } else {
      g.master = zeros_of(g.shard, MemCategory::Parameters, master_device);
      convert(flat_view(g.full, lo, {g.shard}), g.master);
      g.working = flat_view(g.full, lo, {g.shard});
      if (keep) {
        g.kept = zeros_of(g.padded, MemCategory::Parameters, device, DType::BF16);
        convert(g.full, g.kept);
        g.working = flat_view(g.kept, lo, {g.shard});
        g.full.storage()->release();
        g.state = Group::Params::Released;
      }
    }
    g.grad_shard = zeros_of(g.shard, MemCategory::Gradients, device);
    const Device moments = offload ? host : device;
    g.exp_avg = zeros_of(g.shard, MemCategory::OptimizerState, moments);
    g.exp_avg_sq = zeros_of(g.shard, MemCategory::OptimizerState, moments);
    if (stage == 1) {
      g.flat_grad = zeros_of(g.padded, MemCategory::Gradients, device);
      g.bind_gradients();
    }
    g.seen.assign(g.params.size(), false);
    g.piece_begin = pieces_.size();
    // The owned elements [lo, hi) of each parameter: a piece, and an AdamW "parameter".
    for (size_t k = 0; k < g.params.size(); ++k) {
      const auto& p = g.params[k];
      const int64_t a = std::max(lo, g.offsets[k]);
      const int64_t b = std::min(hi, g.offsets[k] + p.tensor.numel());
      if (a >= b) continue;
      Tensor value = flat_view(g.master, a - lo, {b - a});
      const Tensor grad = flat_view(g.grad_shard, a - lo, {b - a});
      pieces_.push_back({p.name, p.tensor.shape(), a - g.offsets[k], b - g.offsets[k], value,
                         p.weight_decay, grad});
      piece_at_.emplace_back(shared_->groups.size(), a - lo);
      shared_->piece_offset.push_back(a - lo);
      shared_->piece_param.push_back(k);
      Tensor seg = value.detach();
      seg.set_grad(grad);
      segments.push_back({p.name + "[" + std::to_string(a - g.offsets[k]) + ":" +
                              std::to_string(b - g.offsets[k]) + "]",
                          seg, p.weight_decay});
      m_views.push_back(flat_view(g.exp_avg, a - lo, {b - a}));
      v_views.push_back(flat_view(g.exp_avg_sq, a - lo, {b - a}));
      optimizer_params_.pieces.push_back(
          {p.name, p.tensor.shape(), a - g.offsets[k], b - g.offsets[k]});
      if (shared_->updates)
        optimizer_params_.deferred.push_back({shared_->updates, pieces_.size() - 1});
    }
    g.piece_end = pieces_.size();
    if (g.wrapped) shared_->last_unit = int(shared_->groups.size());
    shared_->groups.push_back(std::move(g));
  }

  std::weak_ptr<Shared> weak = shared_;
  for (size_t gi = 0; gi < shared_->groups.size(); ++gi) {
    Group& g = shared_->groups[gi];
    for (size_t k = 0; k < g.params.size(); ++k)
      g.params[k].tensor.add_post_accumulate_hook([weak, gi, k](const Tensor&) {
        if (auto s = weak.lock()) s->on_gradient(gi, k);
      });
    if (g.wrapped && (stage >= 2 || shared_->released_between_uses)) {
      auto wrap = [&](const std::string& path, bool user) {
        model.submodule(path).add_forward_wrapper(
            [weak, gi, user](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& inputs) {
              auto s = weak.lock();
              return s ? s->forward(gi, fn, inputs, weak, user) : fn(inputs);
            });
      };
      wrap(unit_names[gi], false);
      for (const auto& [user, unit] : options.unit_users)
        if (unit == unit_names[gi]) wrap(user, true);
    }
    if (stage == 3 && !g.wrapped) {  // parameters of no unit: kept gathered
      shared_->start_gather(g);
      shared_->finish_gather(g);
    }
  }
  optimizer_params_.gather_wholes =
      [weak](const std::vector<Tensor>& values,
             const std::function<bool(const std::string&, const Shape&)>& wanted) {
        auto s = weak.lock();
        LOOM_CHECK(s) << "zero: gather_wholes after the model is gone";
        return s->gather_wholes(values, wanted);
      };
}

ZeroDataParallel::~ZeroDataParallel() {
  shared_->active = false;
}

void ZeroDataParallel::settle() const {
  if (shared_->updates) shared_->updates->wait_all();
}

void ZeroDataParallel::broadcast_parameters() {
  auto& groups = shared_->groups;
  // Groups whose full parameters exist only while used (stage 3; stages 1-2 kept in bf16):
  // each shard rank's master came from the same values (a deferred init is keyed by element,
  // not by layout), and the replicas take replica 0's masters, never a whole group at once.
  // The others: all of rank 0's parameters.
  std::vector<Group*> by_master, by_full;
  for (auto& g : groups)
    (shared_->options.stage == 3 || g.kept.defined() ? by_master : by_full).push_back(&g);
  if (!by_full.empty()) {
    std::vector<dist::WorkPtr> works;
    for (auto* group : {&shard_, &replicate_}) {
      for (Group* g : by_full) works.push_back((*group)->broadcast(g->full, 0));
      for (auto& w : works) w->wait();
      works.clear();
    }
    for (Group* g : by_full)  // a master apart (stages 1-2 offloaded) takes its chunk
      if (g->working.defined())
        convert(flat_view(g->full, shard_->rank() * g->shard, {g->shard}), g->master);
  }
  if (by_master.empty() || replicate_->size() == 1) return;
  // A master in host memory travels through the device (the group's transport), as f32.
  std::vector<Tensor> sent;
  for (Group* g : by_master) {
    if (!g->working.defined()) {
      sent.push_back(g->master);
    } else {
      sent.push_back(
          Tensor::empty({g->shard}, DType::F32, shared_->device, MemCategory::Communication));
      convert(g->master, sent.back());
    }
  }
  std::vector<dist::WorkPtr> works;
  for (auto& t : sent) works.push_back(replicate_->broadcast(t, 0));
  for (auto& w : works) w->wait();
  for (size_t k = 0; k < by_master.size(); ++k)
    if (by_master[k]->working.defined()) convert(sent[k], by_master[k]->master);
  sync_parameters();
}

void ZeroDataParallel::begin_micro_step(int64_t micro, int64_t grad_accum) {
  // Stages 2-3 reduce every micro-step (into the shard); stage 1 only the last one's sum.
  shared_->sync = shared_->options.stage >= 2 || micro + 1 == grad_accum;
}

void ZeroDataParallel::after_backward(int64_t micro, int64_t grad_accum) {
  Shared& s = *shared_;
  if (!s.sync) {
    for (auto& g : s.groups) {  // units some parameter of which had no gradient
      s.release(g);
      g.ready = 0;
      g.seen.assign(g.params.size(), false);
    }
    return;
  }
  // Groups backward did not complete (unused parameters) or re-accumulated after they left
  // go now, in group order, the same on every rank. A stage-2/3 relaunch sends only the new
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

void ZeroDataParallel::sync_parameters() {
  auto& groups = shared_->groups;
  if (shared_->options.stage == 3) {
    for (auto& g : groups) {
      g.upload = g.working.defined();  // the master changed (or is about to: a posted update)
      shared_->release(g);             // blocks: gathered again by their next forward
      if (!g.wrapped) {
        shared_->start_gather(g);
        shared_->finish_gather(g);
      }
    }
    return;
  }
  // In place: the master, or its copy on the device (`working`), is this rank's chunk of
  // `full` (or `kept`).
  std::vector<dist::WorkPtr> works;
  for (auto& g : groups) {
    g.upload = g.working.defined();
    shared_->settle(g);
    shared_->release(g);
    works.push_back(
        shard_->all_gather(shared_->gather_source(g), g.kept.defined() ? g.kept : g.full));
  }
  for (auto& w : works) w->wait();
}

void ZeroDataParallel::zero_grad() {
  for (auto& g : shared_->groups) {
    fill_zero(g.grad_shard);
    if (g.flat_grad.defined()) fill_zero(g.flat_grad);
  }
}

uint64_t ZeroDataParallel::copies_hash() {
  uint64_t h = 0;
  for (Group& g : shared_->groups) {
    Tensor copy = g.kept.defined() ? g.kept : g.full;
    if (shared_->options.stage == 3) {
      shared_->settle(g);
      const Tensor& source = shared_->gather_source(g);
      copy = Tensor::empty({g.padded}, source.dtype(), shared_->device, MemCategory::Communication);
      shard_->all_gather(source, copy)->wait();
    }
    const Tensor host = to_device(copy, cpu_device());
    h = xxh64(host.data_ptr(), host.nbytes(), h);
  }
  return h;
}

std::vector<std::pair<std::string, Tensor>> ZeroDataParallel::gather_full(
    const std::vector<Tensor>& values) {
  LOOM_CHECK(values.size() == pieces_.size())
      << "zero: gather_full got " << values.size() << " values for " << pieces_.size() << " pieces";
  std::vector<std::pair<std::string, Tensor>> out;
  size_t k = 0;
  for (size_t gi = 0; gi < shared_->groups.size(); ++gi) {
    const Group& g = shared_->groups[gi];
    Tensor mine = zeros_of(g.shard, MemCategory::Communication, shared_->device);
    for (; k < pieces_.size() && piece_at_[k].first == gi; ++k) {
      LOOM_CHECK(values[k].numel() == pieces_[k].end - pieces_[k].begin &&
                 values[k].dtype() == DType::F32 && values[k].is_contiguous())
          << "zero: gather_full value " << k << " does not match piece " << pieces_[k].name;
      convert(values[k], flat_view(mine, piece_at_[k].second, {values[k].numel()}));
    }
    Tensor all = Tensor::empty({g.padded}, DType::F32, shared_->device, MemCategory::Other);
    shard_->all_gather(mine, all)->wait();
    for (size_t p = 0; p < g.params.size(); ++p)
      out.emplace_back(g.params[p].name, flat_view(all, g.offsets[p], g.params[p].tensor.shape()));
  }
  return out;
}

}  // namespace loom::parallel
