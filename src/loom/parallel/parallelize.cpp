#include "loom/parallel/parallelize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "loom/nn/layers.h"
#include "loom/ops/ops.h"
#include "loom/parallel/activation_checkpoint.h"
#include "loom/parallel/context_parallel.h"

namespace loom::parallel {

ParallelModel::ParallelModel(const dist::DeviceMesh& mesh, const Topology& topology)
    : mesh_(mesh),
      topology_(topology),
      dp_(mesh.group("dp")),
      tp_(mesh.group("tp")),
      cp_(mesh.group("cp")),
      pp_(mesh.group("pp")) {}

std::unique_ptr<ParallelModel> parallelize(nn::Module& model, const nn::ParallelPlan& plan,
                                           const dist::DeviceMesh& mesh, const Topology& topology,
                                           int64_t micro_batches) {
  std::unique_ptr<ParallelModel> pm(new ParallelModel(mesh, topology));
  ParallelModel& m = *pm;
  // A model built under nn::DeferInit has shapes only: each strategy below allocates what this
  // rank holds and fills it with the values a one-process init gives those elements.
  const std::map<std::string, nn::ParameterInit> deferred = model.take_deferred_inits();
  auto initial_values = [&m, &deferred](const std::string& name, const Tensor& dst,
                                        int64_t local_begin) {
    const auto it = deferred.find(name);
    LOOM_CHECK(it != deferred.end())
        << "parallelize: parameter " << name << " has no values and no deferred init "
        << "(init_parameters was not called on the model)";
    nn::fill_initial(dst, it->second, m.local_runs(name, shape_numel(it->second.whole_shape)),
                     local_begin);
  };
  // 1. Pipeline: what other stages hold leaves the model and the plan.
  std::vector<std::string> blocks = plan.blocks;
  nn::ParallelPlan local_plan = plan;
  if (m.pp_->size() > 1) {
    blocks = m.split_pipeline(model, plan, micro_batches);
    const std::set<std::string> kept(blocks.begin(), blocks.end());
    auto in_kept_block = [&](const std::string& path) {
      for (const auto& b : plan.blocks)
        if (path == b || path.rfind(b + ".", 0) == 0) return kept.count(b) > 0;
      return true;
    };
    for (auto* list :
         {&local_plan.attention, &local_plan.latent_attention, &local_plan.ssm, &local_plan.column,
          &local_plan.row, &local_plan.blocks, &local_plan.per_head})
      list->erase(std::remove_if(list->begin(), list->end(),
                                 [&](const std::string& p) { return !in_kept_block(p); }),
                  list->end());
    // Each chunk of this rank runs on its own: a sequence-split region each.
    const auto& chunks = m.pipeline_.chunk_blocks;
    for (size_t c = 1, at = 0; c <= chunks.size(); ++c) {
      at += size_t(chunks[c - 1].second - chunks[c - 1].first);
      if (c < chunks.size()) local_plan.stretch_starts.push_back(at);
    }
  }
  // 2. Tensor (and sequence) parallelism.
  if (m.tp_->size() > 1) {
    m.tp_layout_ = apply_tensor_parallel(model, local_plan, m.tp_, topology.sequence_parallel);
    if (!m.tp_layout_.partial_gradients.empty())
      m.partial_sums_.push_back({m.tp_, m.tp_layout_.partial_gradients, false});
  }
  // 3. Expert parallelism: groups of ep consecutive dp ranks split the experts. Under DiLoCo
  // each worker carves them from its own ranks (dp_shard): the ranks holding the same experts
  // stay inside a worker, and the workers' ranks at the same place hold the same experts.
  if (topology.ep > 1) {
    const int64_t E = topology.ep;
    const auto carved = topology.outer_sync ? mesh.group("dp_shard") : m.dp_;
    const int64_t rank = carved->rank();
    LOOM_CHECK(carved->size() % E == 0)
        << "parallel.ep " << E << " does not divide the " << carved->size()
        << (topology.outer_sync ? " data-parallel ranks of a DiLoCo worker"
                                : " data-parallel ranks")
        << " (the expert-parallel groups are carved from them)";
    m.ep_ = carved->split(int(rank / E), int(rank), "ep");
    m.edp_ = carved->split(int(rank % E), int(rank), "expert_dp");
    m.ep_layout_ = apply_expert_parallel(model, m.ep_);
  }
  // 4. Context parallelism.
  m.sequence_shards_ = m.cp_->size() > 1 && plan.sequence_shards;
  if (m.cp_->size() > 1)
    m.partial_sums_.push_back({m.cp_,
                               apply_context_parallel(model, local_plan, m.cp_,
                                                      topology.context_parallel, topology.ulysses),
                               false});
  for (const auto& p : model.named_parameters()) m.local_numel_[p.name] = p.tensor.numel();
  // 5. Activation checkpointing.
  apply_activation_checkpointing(model, blocks, topology.recompute);
  // 6. Data parallelism; every replica starts from rank 0's weights.
  if (topology.zero_stage() > 0) {
    m.replicas_ = topology.outer_sync
                      ? std::make_shared<dist::SingleProcessGroup>("replica", mesh.world()->rank())
                      : mesh.group("dp_replicate");
    ZeroOptions options;
    options.stage = topology.zero_stage();
    options.gather_dtype = topology.gather_dtype;
    options.initial_values = initial_values;
    options.offload_optimizer = topology.offload_optimizer;
    for (const auto& [name, shard] : m.ep_layout_.sharded) options.skip.insert(name);
    // The units ZeRO wraps, in forward order: the modules before the blocks, the blocks, the
    // modules after them -- those this rank holds parameters of (a pipeline stage holds some).
    // A tied head holds none of its own: it uses the embedding's unit.
    std::vector<std::string> units;
    auto add_unit = [&](const std::string& unit) {
      if (std::find(units.begin(), units.end(), unit) != units.end()) return;
      for (const auto& p : model.named_parameters())
        if (p.name.rfind(unit + ".", 0) == 0 && !options.skip.count(p.name)) {
          units.push_back(unit);
          return;
        }
    };
    for (const auto& unit : plan.first_stage) add_unit(unit);
    for (const auto& block : blocks) add_unit(block);
    for (const auto& unit : plan.last_stage) add_unit(unit);
    bool tied_head = false;
    model.for_each_submodule([&](const std::string& path, nn::Module& module) {
      tied_head |= path == plan.vocab_head && dynamic_cast<nn::TiedProjection*>(&module);
    });
    if (tied_head && std::find(units.begin(), units.end(), plan.vocab_embedding) != units.end())
      options.unit_users[plan.vocab_head] = plan.vocab_embedding;
    m.zero_ = std::make_unique<ZeroDataParallel>(model, units, options, mesh.group("dp_shard"),
                                                 m.replicas_);
    m.zero_->broadcast_parameters();
    m.pieces_ = m.zero_->pieces();
    m.shared_pieces_ = m.pieces_.size();
    if (m.ep_) {
      // The experts: sharded over the ranks that hold the same ones, in the blocks they are in.
      ZeroOptions experts = options;
      experts.skip.clear();
      experts.unit_users.clear();
      std::vector<std::string> expert_blocks;
      for (const auto& p : model.named_parameters()) {
        if (!m.ep_layout_.sharded.count(p.name)) {
          experts.skip.insert(p.name);
          continue;
        }
        for (const auto& b : blocks)
          if (p.name.rfind(b + ".", 0) == 0 &&
              std::find(expert_blocks.begin(), expert_blocks.end(), b) == expert_blocks.end())
            expert_blocks.push_back(b);
      }
      m.zero_experts_ = std::make_unique<ZeroDataParallel>(
          model, expert_blocks, experts, m.edp_,
          std::make_shared<dist::SingleProcessGroup>("expert_replica", mesh.world()->rank()));
      for (const auto& p : m.zero_experts_->pieces()) m.pieces_.push_back(p);
    }
  } else {
    const auto params = model.named_parameters();
    for (const auto& p : params)
      if (!p.tensor.allocated()) {
        try {
          p.tensor.storage()->materialize();
        } catch (const Error& e) {  // the limit or the machine: say which parameter wanted it
          throw Error(e.message() + " (parameter " + p.name + ", a tensor of shape " +
                          shape_str(p.tensor.shape()) + ")",
                      e.where());
        }
        initial_values(p.name, p.tensor, 0);
      }
    for (const auto& p : params)
      m.pieces_.push_back(
          {p.name, p.tensor.shape(), 0, p.tensor.numel(), p.tensor, p.weight_decay, Tensor()});
    m.replicas_ = topology.outer_sync ? mesh.group("dp_shard") : m.dp_;
    std::vector<nn::NamedParameter> shared, experts;
    for (const auto& p : params)
      (m.ep_layout_.sharded.count(p.name) ? experts : shared).push_back(p);
    const auto bucket = int64_t(topology.bucket_mb * 1024 * 1024);
    if (m.replicas_->size() > 1) {  // one replica needs no wrapper: the step stays as it is
      m.ddp_ = std::make_unique<DistributedDataParallel>(shared, m.replicas_, bucket);
      m.ddp_->broadcast_parameters(0);
    }
    if (m.edp_ && m.edp_->size() > 1 && !experts.empty()) {
      m.ddp_experts_ = std::make_unique<DistributedDataParallel>(experts, m.edp_, bucket);
      m.ddp_experts_->broadcast_parameters(0);
    }
  }
  return pm;
}

std::vector<nn::ElementRun> ParallelModel::local_runs(const std::string& name,
                                                      int64_t whole_numel) const {
  std::vector<nn::ElementRun> runs{{0, 0, whole_numel}};
  if (const auto tp = tp_layout_.sharded.find(name); tp != tp_layout_.sharded.end())
    runs = tp->second.runs(tp_->rank());
  if (const auto ep = ep_layout_.sharded.find(name); ep != ep_layout_.sharded.end())
    runs = nn::compose_runs(ep->second.runs(ep_->rank()), runs);
  return runs;
}

std::string ParallelModel::describe() const {
  std::ostringstream s;
  const int n = mesh_.world()->size();
  if (n == 1) return "1 process";
  const Topology& t = topology_;
  s << n << " processes (";
  if (pp_->size() > 1)
    s << "pp " << pp_->size() << " " << name_of(t.pipeline_schedule)
      << (t.pipeline_chunks > 1 ? " x" + std::to_string(t.pipeline_chunks) : "") << " x ";
  if (tp_->size() > 1)
    s << "tp " << tp_->size() << (t.sequence_parallel ? " with sequence parallel" : "") << " x ";
  if (cp_->size() > 1) {
    s << "cp " << cp_->size() << " " << name_of(t.context_parallel);
    if (t.context_parallel == ContextParallelKind::Usp)
      s << " (ring " << cp_->size() / t.ulysses << " x Ulysses " << t.ulysses << ")";
    s << " x ";
  }
  s << "dp " << dp_->size();
  if (ep_) s << " (experts over ep " << ep_->size() << ")";
  if (mesh_.degree("dp_replicate") > 1)
    s << " = " << mesh_.degree("dp_replicate") << (t.outer_sync ? " DiLoCo workers" : " replicas")
      << " x " << mesh_.degree("dp_shard") << " shards";
  s << ": " << name_of(t.data_parallel);
  if (t.gather_dtype != DType::F32) s << ", gathered in " << dtype_name(t.gather_dtype);
  s << ")";
  return s.str();
}

nn::OptimizerParams ParallelModel::optimizer_params() const {
  if (zero_experts_) {
    nn::OptimizerParams out = zero_->optimizer_params();
    const nn::OptimizerParams& e = zero_experts_->optimizer_params();
    out.params.insert(out.params.end(), e.params.begin(), e.params.end());
    out.exp_avg.insert(out.exp_avg.end(), e.exp_avg.begin(), e.exp_avg.end());
    out.exp_avg_sq.insert(out.exp_avg_sq.end(), e.exp_avg_sq.begin(), e.exp_avg_sq.end());
    // (zero_'s gather_wholes reads its own pieces, the first ones, and the experts' never take
    // part: optim::muon_updates leaves 3-D tensors to AdamW.)
    out.pieces.insert(out.pieces.end(), e.pieces.begin(), e.pieces.end());
    if (!out.deferred.empty() || !e.deferred.empty()) {  // aligned with params, or empty
      out.deferred.resize(out.params.size() - e.params.size());
      out.deferred.insert(out.deferred.end(), e.deferred.begin(), e.deferred.end());
      out.deferred.resize(out.params.size());
    }
    return out;
  }
  if (zero_) return zero_->optimizer_params();
  nn::OptimizerParams out;
  for (const auto& p : pieces_) out.params.push_back({p.name, p.value, p.weight_decay});
  return out;
}

std::vector<PieceSpan> ParallelModel::piece_spans(bool share) const {
  // Replicas hold the same pieces: replica q of Q takes the q-th part of each (the cp ranks
  // are replicas, and the tp ranks are of the parameters they do not split).
  const int64_t T = tp_->size();
  std::vector<PieceSpan> out;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const auto& p = pieces_[k];
    int64_t q = 0, Q = 1;
    if (share) {
      const bool split = tp_sharded(p);
      const int64_t t = split ? 0 : tp_->rank(), Tq = split ? 1 : T;
      // What both pipeline ends hold (maybe sharded differently): the first stage's.
      if (ends_shared_.count(p.name) && !pipeline_.first) continue;
      q = (replicas_->rank() * cp_->size() + cp_->rank()) * Tq + t;
      Q = replicas_->size() * cp_->size() * Tq;
      if (ep_sharded(p)) {  // an expert's replicas: the ranks holding the same experts
        const int64_t C = cp_->size(), c = cp_->rank();  // (ZeRO: a shard, over edp)
        q = ((zero_experts_ ? 0 : edp_->rank()) * C + c) * T + tp_->rank();
        Q = (zero_experts_ ? 1 : edp_->size()) * C * T;
      }
    }
    for (const auto& range : whole_ranges(p)) {
      const int64_t n = range.end - range.begin, a = n * q / Q, b = n * (q + 1) / Q;
      if (share && a == b && n > 0) continue;
      out.push_back({k, whole_shape(p), range.begin + a, range.begin + b, range.offset + a});
    }
  }
  return out;
}

std::vector<std::string> ParallelModel::split_pipeline(nn::Module& model,
                                                       const nn::ParallelPlan& plan,
                                                       int64_t micro_batches) {
  const int64_t P = pp_->size(), p = pp_->rank(), V = topology_.pipeline_chunks;
  Pipeline& pipe = pipeline_;
  pipe.schedule = make_pipe_schedule(topology_.pipeline_schedule, P, micro_batches, V);
  pipe.group = pp_;
  pipe.first = p == 0;     // stage 0 is chunk 0 of rank 0
  pipe.last = p == P - 1;  // stage S - 1 is chunk V - 1 of rank P - 1
  const auto stages = split_into_stages(int64_t(plan.blocks.size()), P * V);
  // The unit (a block, or a first/last-stage module) each parameter lies in, and who holds it.
  std::map<std::string, int> owner;  // unit -> the pipeline rank that has it (for gathers)
  std::set<std::string> kept;
  for (int64_t s = 0; s < P * V; ++s)
    for (int64_t i = stages[size_t(s)].first; i < stages[size_t(s)].second; ++i)
      owner[plan.blocks[size_t(i)]] = int(s % P);
  for (int64_t c = 0; c < V; ++c) {
    pipe.chunk_blocks.push_back(stages[size_t(c * P + p)]);
    for (int64_t i = stages[size_t(c * P + p)].first; i < stages[size_t(c * P + p)].second; ++i)
      kept.insert(plan.blocks[size_t(i)]);
  }
  std::vector<std::string> blocks(kept.begin(), kept.end());
  std::sort(blocks.begin(), blocks.end(), [&](const std::string& a, const std::string& b) {
    return std::find(plan.blocks.begin(), plan.blocks.end(), a) <
           std::find(plan.blocks.begin(), plan.blocks.end(), b);
  });
  std::set<std::string> shared_units;
  for (const auto& u : plan.last_stage) owner.emplace(u, int(P - 1));
  for (const auto& u : plan.first_stage) {
    if (owner.count(u)) shared_units.insert(u);
    owner[u] = 0;
  }
  if (pipe.first) kept.insert(plan.first_stage.begin(), plan.first_stage.end());
  if (pipe.last) kept.insert(plan.last_stage.begin(), plan.last_stage.end());
  for (const auto& param : model.named_parameters()) {
    std::string unit;
    for (const auto& [u, rank] : owner)
      if (param.name.rfind(u + ".", 0) == 0) unit = u;
    LOOM_CHECK(!unit.empty())
        << "pipeline: parameter " << param.name
        << " lies in no block and in no first- or last-stage module of the model's plan";
    whole_model_.emplace_back(param.name, param.tensor.shape(), owner.at(unit));
    if (shared_units.count(unit)) ends_shared_.insert(param.name);
  }
  for (const auto& [unit, rank] : owner)
    if (!kept.count(unit))
      for (const auto& param : model.remove_submodule(unit)->named_parameters())
        param.tensor.storage()->release();
  // The first and last ranks sum what both hold. Under ZeRO the two ends shard it differently
  // (their flat groups differ), so the group spans both ends' dp_shard ranks and the sum goes
  // through a buffer of the whole tensor (see after_backward).
  const auto& world = mesh_.world();
  const bool zero = topology_.zero_stage() > 0;
  int color = world->size() + world->rank();  // a group of its own
  if (pipe.first || pipe.last) {
    color = 0;
    for (const char* axis : {"dp_replicate", "dp_shard", "cp", "tp"}) {
      if (zero && std::string(axis) == "dp_shard") continue;
      color = color * int(mesh_.degree(axis)) + int(mesh_.coordinate(axis));
    }
  }
  ends_ = world->split(color, world->rank(), "pp_ends");
  if (!ends_shared_.empty() && (pipe.first || pipe.last))
    partial_sums_.push_back({ends_, ends_shared_, /*through_whole=*/true});
  return blocks;
}

std::vector<int64_t> ParallelModel::sequence_rows(int64_t T) const {
  if (!sequence_shards_) return {};
  return context_parallel_rows(T, cp_->rank(), cp_->size(), topology_.context_parallel,
                               topology_.ulysses);
}

double ParallelModel::run_pipeline_step(const PipelineStages& stages) {
  begin_micro_step(0, 2);
  const double sum = run_pipeline(pipeline_.schedule, stages, pipeline_.group, &pipeline_times_);
  begin_micro_step(1, 2);
  after_backward(1, 2);
  return from_last_stage(sum / double(pipeline_.schedule.micro_batches));
}

std::vector<double> ParallelModel::pipeline_waiting() const {
  const int64_t P = pp_->size();
  Tensor all = Tensor::empty({P}, DType::F32);
  const float mine = float(pipeline_times_.waiting / std::max(pipeline_times_.total, 1e-9));
  pp_->all_gather(from_vector(std::vector<float>{mine}, {1}), all)->wait();
  const std::vector<float> v = to_vector(all);
  return std::vector<double>(v.begin(), v.end());
}

double ParallelModel::from_last_stage(double value) const {
  if (!pipeline()) return value;
  Tensor t = from_vector(std::vector<float>{pipeline_.last ? float(value) : 0.0f}, {1});
  pp_->all_reduce(t, dist::ReduceOp::Sum)->wait();
  return double(t.data<float>()[0]);
}

std::vector<nn::NamedParameter> ParallelModel::piece_parameters() const {
  std::vector<nn::NamedParameter> out;
  for (const auto& p : pieces_) {
    const bool whole = p.begin == 0 && p.end == shape_numel(p.shape);
    out.push_back({whole
                       ? p.name
                       : p.name + "[" + std::to_string(p.begin) + ":" + std::to_string(p.end) + "]",
                   p.value, p.weight_decay});
  }
  return out;
}

std::vector<std::pair<dist::ProcessGroup*, uint64_t>> ParallelModel::zero_copies() const {
  settle();
  std::vector<std::pair<dist::ProcessGroup*, uint64_t>> out;
  if (zero_ && mesh_.degree("dp_shard") > 1)
    out.emplace_back(mesh_.group("dp_shard").get(), zero_->copies_hash());
  if (zero_experts_ && edp_->size() > 1) out.emplace_back(edp_.get(), zero_experts_->copies_hash());
  return out;
}

NamedTensors ParallelModel::gather_full(const std::vector<Tensor>& values) {
  NamedTensors out;
  if (zero_experts_) {
    out = zero_->gather_full({values.begin(), values.begin() + long(shared_pieces_)});
    for (auto& named :
         zero_experts_->gather_full({values.begin() + long(shared_pieces_), values.end()}))
      out.push_back(std::move(named));
  } else if (zero_) {
    out = zero_->gather_full(values);
  } else {
    for (size_t k = 0; k < pieces_.size(); ++k) out.emplace_back(pieces_[k].name, values.at(k));
  }
  gather_shards(out, tp_layout_.sharded, *tp_);
  if (ep_) gather_shards(out, ep_layout_.sharded, *ep_);
  if (!pipeline()) return out;
  // Every parameter from the pipeline rank that holds it.
  std::map<std::string, Tensor> mine(out.begin(), out.end());
  NamedTensors all;
  for (const auto& [name, shape, owner] : whole_model_) {
    auto it = mine.find(name);
    Tensor t =
        it != mine.end() && pp_->rank() == owner ? contiguous(it->second) : Tensor::empty(shape);
    pp_->broadcast(t, owner)->wait();
    all.emplace_back(name, t);
  }
  return all;
}

void ParallelModel::gather_shards(NamedTensors& tensors,
                                  const std::map<std::string, TensorShard>& layout,
                                  dist::ProcessGroup& group) const {
  // Every rank's part, placed into the whole by its runs.
  for (auto& [name, part] : tensors) {
    auto it = layout.find(name);
    if (it == layout.end()) continue;
    const TensorShard& shard = it->second;
    const int64_t P = group.size(), n = part.numel();
    Tensor all = Tensor::empty({P * n}, part.dtype());
    group.all_gather(contiguous(part), all)->wait();
    Tensor whole = Tensor::empty(shard.whole_shape, part.dtype());
    const size_t elem = dtype_size(part.dtype());
    for (int64_t q = 0; q < P; ++q)
      for (const auto& run : shard.runs(q))
        std::memcpy(static_cast<char*>(whole.data_ptr()) + size_t(run.whole) * elem,
                    static_cast<const char*>(all.data_ptr()) + size_t(q * n + run.local) * elem,
                    size_t(run.length) * elem);
    part = whole;
  }
}

std::vector<ParallelModel::WholeRange> ParallelModel::whole_ranges(const ParamPiece& p) const {
  const bool expert = ep_sharded(p);
  const auto& layout = expert ? ep_layout_.sharded : tp_layout_.sharded;
  auto it = layout.find(p.name);
  if (it == layout.end()) return {{p.begin, p.end, 0}};
  std::vector<WholeRange> out;
  for (const auto& run : it->second.runs(expert ? ep_->rank() : tp_->rank())) {
    const int64_t a = std::max(p.begin, run.local), b = std::min(p.end, run.local + run.length);
    if (a < b) out.push_back({run.whole + a - run.local, run.whole + b - run.local, a - p.begin});
  }
  return out;
}

const Shape& ParallelModel::whole_shape(const ParamPiece& p) const {
  const auto& layout = ep_sharded(p) ? ep_layout_.sharded : tp_layout_.sharded;
  auto it = layout.find(p.name);
  return it == layout.end() ? p.shape : it->second.whole_shape;
}

void ParallelModel::begin_micro_step(int64_t micro, int64_t grad_accum) {
  if (zero_) zero_->begin_micro_step(micro, grad_accum);
  if (zero_experts_) zero_experts_->begin_micro_step(micro, grad_accum);
  if (ddp_) ddp_->set_gradient_sync(micro + 1 == grad_accum);
  if (ddp_experts_) ddp_experts_->set_gradient_sync(micro + 1 == grad_accum);
}

void ParallelModel::after_backward(int64_t micro, int64_t grad_accum) {
  if (zero_) zero_->after_backward(micro, grad_accum);
  if (zero_experts_) zero_experts_->after_backward(micro, grad_accum);
  if (ddp_ && micro + 1 == grad_accum) ddp_->finish_gradient_sync();
  if (ddp_experts_ && micro + 1 == grad_accum) ddp_experts_->finish_gradient_sync();
  // An expert's gradient holds the tokens of every rank of its ep group (the all-to-all's
  // backward brought them); averaged over the edp ranks (DDP or ZeRO) it is ep times the dp
  // average.
  if (ep_ && micro + 1 == grad_accum)
    for (const auto& p : pieces_)
      if (ep_sharded(p) && p.gradient().defined())
        copy_(p.gradient(), mul_scalar(p.gradient(), 1.0 / double(ep_->size())));
  // Parameters used on sequence shards: each rank of the group has its tokens' share of the
  // gradient. Summing after the data-parallel reduction gives the same total (both are sums).
  if (micro + 1 == grad_accum)
    for (const auto& sum : partial_sums_) {
      std::vector<dist::WorkPtr> pending;
      if (!sum.through_whole) {
        for (const auto& p : pieces_) {
          const Tensor g = p.gradient();
          if (g.defined() && sum.names.count(p.name))
            pending.push_back(sum.group->all_reduce(g, dist::ReduceOp::Sum));
        }
        for (auto& w : pending) w->wait();
        continue;
      }
      // Each rank adds whatever ranges it holds (maybe none) into a zero tensor of the whole
      // size; the sum has every rank's contribution wherever it lies.
      std::vector<Tensor> wholes;
      for (const auto& name : sum.names) {
        Tensor whole = zeros({local_numel_.at(name)});
        for (const auto& p : pieces_)
          if (p.name == name && p.gradient().defined())
            copy_(narrow(whole, 0, p.begin, p.end - p.begin),
                  reshape(p.gradient(), {p.end - p.begin}));
        pending.push_back(sum.group->all_reduce(whole, dist::ReduceOp::Sum));
        wholes.push_back(whole);
      }
      for (auto& w : pending) w->wait();
      size_t k = 0;
      for (const auto& name : sum.names) {
        for (const auto& p : pieces_)
          if (p.name == name && p.gradient().defined())
            copy_(p.gradient(),
                  reshape(narrow(wholes[k], 0, p.begin, p.end - p.begin), p.gradient().shape()));
        ++k;
      }
    }
}

double ParallelModel::grad_norm() {
  // Each element once: split parts add up over the tp ranks, whole parameters (the same on
  // every tp rank) count 1/tp per rank; pipeline stages add up, what both ends hold counts
  // half on each; ZeRO's shards add up over dp_shard.
  // The experts' parts add up over the ep ranks (each holds other experts).
  std::vector<Tensor> grads, expert_grads;
  std::vector<double> weights;
  for (const auto& p : pieces_) {
    if (ep_sharded(p)) {
      expert_grads.push_back(p.gradient());
      continue;
    }
    grads.push_back(p.gradient());
    weights.push_back((tp_sharded(p) ? 1.0 : 1.0 / double(tp_->size())) *
                      (ends_shared_.count(p.name) ? 0.5 : 1.0));
  }
  // ZeRO's shards add up over dp_shard (the experts': over edp x ep, the whole dp group).
  Tensor shared = from_vector(std::vector<float>{float(sum_squares(grads, weights))}, {1});
  if (zero_ && mesh_.degree("dp_shard") > 1)
    mesh_.group("dp_shard")->all_reduce(shared, dist::ReduceOp::Sum)->wait();
  double local = double(shared.data<float>()[0]);
  if (ep_) {
    // (whole on every tp rank, so 1/tp each, as the other whole parameters)
    Tensor experts = from_vector(
        std::vector<float>{float(sum_squares(
            expert_grads, std::vector<double>(expert_grads.size(), 1.0 / double(tp_->size()))))},
        {1});
    // (ZeRO: each element once over the ranks that split the experts or shard them: the
    // data-parallel ranks, a DiLoCo worker's own)
    const auto& over = !zero_experts_ ? ep_ : topology_.outer_sync ? mesh_.group("dp_shard") : dp_;
    over->all_reduce(experts, dist::ReduceOp::Sum)->wait();
    local += double(experts.data<float>()[0]);
  }
  Tensor sum = from_vector(std::vector<float>{float(local)}, {1});
  for (const auto& group : {tp_, pp_})
    if (group && group->size() > 1) group->all_reduce(sum, dist::ReduceOp::Sum)->wait();
  return std::sqrt(double(sum.data<float>()[0]));
}

void ParallelModel::settle() const {
  if (zero_) zero_->settle();
  if (zero_experts_) zero_experts_->settle();
}

void ParallelModel::sync_parameters() {
  if (zero_) zero_->sync_parameters();
  if (zero_experts_) zero_experts_->sync_parameters();
}

void ParallelModel::zero_grad() {
  if (zero_experts_) zero_experts_->zero_grad();
  if (zero_) return zero_->zero_grad();  // its gradients are views of the shards: kept, zeroed
  for (const auto& p : pieces_) p.value.set_grad(Tensor());  // the next backward makes new ones
}

}  // namespace loom::parallel
