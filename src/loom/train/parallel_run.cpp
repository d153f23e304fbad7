#include "loom/train/parallel_run.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <utility>

#include "loom/backend/backend.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/activation_checkpoint.h"
#include "loom/train/checkpoint_dir.h"

namespace loom::train {

ParallelRun::ParallelRun(const Config& cfg)
    : cfg_(cfg),
      mesh_(dist::init_world({cfg.parallel.timeout_s}), cfg.parallel.dims),
      dp_(mesh_.group("dp")),
      tp_(mesh_.group("tp")),
      cp_(mesh_.group("cp")),
      pp_(mesh_.group("pp")),
      dp_rank_(dp_->rank()),
      dp_size_(dp_->size()),
      local_batch_(cfg.train.batch_size / dp_size_),
      main_(mesh_.world()->rank() == 0) {
  LOOM_CHECK(cfg.train.batch_size % dp_size_ == 0)
      << "train.batch_size " << cfg.train.batch_size << " (the global batch) does not split "
      << "evenly over " << dp_size_ << " data-parallel ranks";
  checkpoint_group_ = mesh_.world()->split(0, mesh_.world()->rank(), "checkpoint");
}

ParallelRun::~ParallelRun() {
  if (saver_.joinable()) saver_.join();
}

void ParallelRun::wait_checkpoint() {
  if (saver_.joinable()) saver_.join();
  if (save_error_) std::rethrow_exception(std::exchange(save_error_, nullptr));
}

std::string ParallelRun::describe() const {
  std::ostringstream s;
  const int n = mesh_.world()->size();
  if (n == 1) return "1 process";
  s << n << " processes (";
  if (pp_->size() > 1)
    s << "pp " << pp_->size() << " " << cfg_.parallel.pipeline_schedule
      << (cfg_.parallel.pipeline_chunks > 1 ? " x" + std::to_string(cfg_.parallel.pipeline_chunks) : "")
      << " x ";
  if (tp_->size() > 1)
    s << "tp " << tp_->size() << (cfg_.parallel.sequence_parallel ? " with sequence parallel" : "")
      << " x ";
  if (cp_->size() > 1) s << "cp " << cp_->size() << " " << cfg_.parallel.context_parallel << " x ";
  s << "dp " << dp_size_;
  if (mesh_.degree("dp_replicate") > 1)
    s << " = " << mesh_.degree("dp_replicate") << " replicas x " << mesh_.degree("dp_shard")
      << " shards";
  s << ": " << cfg_.parallel.data_parallel;
  if (cfg_.parallel.gather_dtype != "f32") s << ", gathered in " << cfg_.parallel.gather_dtype;
  s << ")";
  return s.str();
}

std::string ParallelRun::metrics_path(const std::string& run_dir) const {
  if (main_) return run_dir + "/metrics.jsonl";
  std::filesystem::create_directories(run_dir + "/logs");
  return run_dir + "/logs/metrics-rank-" + std::to_string(mesh_.world()->rank()) + ".jsonl";
}

optim::AdamW& ParallelRun::setup(nn::Module& model, const std::vector<std::string>& block_names,
                                 const nn::ParallelPlan& plan,
                                 const optim::AdamWConfig& adamw) {
  const std::string& strategy = cfg_.parallel.data_parallel;
  std::vector<std::string> blocks = block_names;
  nn::ParallelPlan local_plan = plan;
  if (pp_->size() > 1) {
    // What other stages hold leaves the model and the plan.
    blocks = setup_pipeline(model, plan);
    const std::set<std::string> kept(blocks.begin(), blocks.end());
    auto in_kept_block = [&](const std::string& path) {
      for (const auto& b : plan.blocks)
        if (path == b || path.rfind(b + ".", 0) == 0) return kept.count(b) > 0;
      return true;
    };
    for (auto* list : {&local_plan.attention, &local_plan.column, &local_plan.row, &local_plan.blocks})
      list->erase(std::remove_if(list->begin(), list->end(),
                                 [&](const std::string& p) { return !in_kept_block(p); }),
                  list->end());
    // Each chunk of this rank runs on its own: a sequence-split region each.
    for (size_t c = 1, at = 0; c <= pipeline_.chunk_blocks.size(); ++c) {
      at += size_t(pipeline_.chunk_blocks[c - 1].second - pipeline_.chunk_blocks[c - 1].first);
      if (c < pipeline_.chunk_blocks.size()) local_plan.stretch_starts.push_back(at);
    }
    // The vocabulary split needs the embedding and the head on one rank: with a pipeline they
    // stay whole (tied embeddings would have to be split alike on both ends).
    local_plan.vocab_embedding = local_plan.vocab_head = "";
  }
  // Model parallelism next: it changes the parameters' shapes, and its wrappers run inside
  // the others (a recompute or a ZeRO-3 gather wraps the whole model-parallel block). Context
  // parallelism's wrappers run outside tensor parallelism's: the sequence is split over the
  // cp ranks first, each share then over the tp ranks.
  if (tp_->size() > 1) {
    tp_layout_ = parallel::apply_tensor_parallel(model, local_plan, tp_, cfg_.parallel.sequence_parallel);
    if (!tp_layout_.partial_gradients.empty())
      partial_sums_.push_back({tp_, tp_layout_.partial_gradients, false});
  }
  sequence_shards_ = cp_->size() > 1 && plan.sequence_shards;
  if (cp_->size() > 1)
    partial_sums_.push_back(
        {cp_,
         parallel::apply_context_parallel(model, local_plan, cp_,
                                          cfg_.parallel.context_parallel == "ring"
                                              ? parallel::ContextParallelKind::Ring
                                              : parallel::ContextParallelKind::Ulysses),
         false});
  for (const auto& p : model.named_parameters()) local_numel_[p.name] = p.tensor.numel();
  // First, so that ZeRO-3's wrapper runs outside it (gathering before a recompute).
  parallel::apply_activation_checkpointing(model, blocks, cfg_.parallel.activation_checkpointing);
  if (strategy.rfind("zero", 0) == 0) {
    // Sharded over dp_shard, replicated over dp_replicate (HSDP when both exceed 1).
    parallel::ZeroOptions options;
    options.stage = strategy[4] - '0';
    options.gather_dtype = dtype_from_name(cfg_.parallel.gather_dtype);
    replicas_ = mesh_.group("dp_replicate");
    zero_ = std::make_unique<parallel::ZeroDataParallel>(model, blocks, options,
                                                         mesh_.group("dp_shard"), replicas_, adamw);
    zero_->broadcast_parameters();
    pieces_ = zero_->pieces();
    optimizer_ = &zero_->optimizer();
  } else {
    const auto params = model.named_parameters();
    for (const auto& p : params)
      pieces_.push_back({p.name, p.tensor.shape(), 0, p.tensor.numel(), p.tensor, p.weight_decay, Tensor()});
    adamw_ = std::make_unique<optim::AdamW>(params, adamw);
    optimizer_ = adamw_.get();
    replicas_ = dp_;
    if (dp_size_ > 1) {  // one data-parallel rank needs no wrapper: the step stays as it is
      ddp_ = std::make_unique<parallel::DistributedDataParallel>(
          params, dp_, int64_t(cfg_.parallel.bucket_mb * 1024 * 1024));
      ddp_->broadcast_parameters(0);
    }
  }
  // Peaks (and the memory limit) from here on describe training, not building the full model
  // before sharding it.
  host_allocator().reset_peak();
  host_allocator().set_limit(int64_t(cfg_.run.memory_limit_mb * 1024 * 1024));
  return *optimizer_;
}

std::vector<std::string> ParallelRun::setup_pipeline(nn::Module& model, const nn::ParallelPlan& plan) {
  const int64_t P = pp_->size(), p = pp_->rank(), V = cfg_.parallel.pipeline_chunks;
  Pipeline& pipe = pipeline_;
  pipe.schedule = parallel::make_pipe_schedule(
      parallel::schedule_kind_from_name(cfg_.parallel.pipeline_schedule), P, cfg_.train.grad_accum, V);
  pipe.group = pp_;
  pipe.first = p == 0;      // stage 0 is chunk 0 of rank 0
  pipe.last = p == P - 1;   // stage S - 1 is chunk V - 1 of rank P - 1
  const auto stages = parallel::split_into_stages(int64_t(plan.blocks.size()), P * V);
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
    LOOM_CHECK(!unit.empty()) << "pipeline: parameter " << param.name
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
  const bool zero = cfg_.parallel.data_parallel != "ddp";
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

std::vector<int64_t> ParallelRun::sequence_rows(int64_t T) const {
  if (!sequence_shards_) return {};
  return parallel::context_parallel_rows(T, cp_->rank(), cp_->size(),
                                         cfg_.parallel.context_parallel == "ring"
                                             ? parallel::ContextParallelKind::Ring
                                             : parallel::ContextParallelKind::Ulysses);
}

double ParallelRun::run_pipeline_step(const parallel::PipelineStages& stages) {
  begin_micro_step(0, 2);
  const double sum = parallel::run_pipeline(pipeline_.schedule, stages, pipeline_.group);
  begin_micro_step(1, 2);
  after_backward(1, 2);
  return from_last_stage(sum / double(pipeline_.schedule.micro_batches));
}

double ParallelRun::from_last_stage(double value) const {
  if (!pipeline()) return value;
  Tensor t = from_vector(std::vector<float>{pipeline_.last ? float(value) : 0.0f}, {1});
  pp_->all_reduce(t, dist::ReduceOp::Sum)->wait();
  return double(t.data<float>()[0]);
}

std::vector<nn::NamedParameter> ParallelRun::piece_parameters() const {
  std::vector<nn::NamedParameter> out;
  for (const auto& p : pieces_) {
    const bool whole = p.begin == 0 && p.end == shape_numel(p.shape);
    out.push_back({whole ? p.name
                         : p.name + "[" + std::to_string(p.begin) + ":" + std::to_string(p.end) + "]",
                   p.value, p.weight_decay});
  }
  return out;
}

NamedTensors ParallelRun::gather_full(const std::vector<Tensor>& values) {
  NamedTensors out;
  if (zero_) {
    out = zero_->gather_full(values);
  } else {
    for (size_t k = 0; k < pieces_.size(); ++k) out.emplace_back(pieces_[k].name, values.at(k));
  }
  // Tensor-parallel parts: every rank's part, placed into the whole by its runs.
  for (auto& [name, part] : out) {
    auto it = tp_layout_.sharded.find(name);
    if (it == tp_layout_.sharded.end()) continue;
    const parallel::TensorShard& shard = it->second;
    const int64_t P = tp_->size(), n = part.numel();
    Tensor all = Tensor::empty({P * n}, part.dtype());
    tp_->all_gather(contiguous(part), all)->wait();
    Tensor whole = Tensor::empty(shard.whole_shape, part.dtype());
    const size_t elem = dtype_size(part.dtype());
    for (int64_t q = 0; q < P; ++q)
      for (const auto& run : shard.runs(q))
        std::memcpy(static_cast<char*>(whole.data_ptr()) + size_t(run.whole) * elem,
                    static_cast<const char*>(all.data_ptr()) + size_t(q * n + run.local) * elem,
                    size_t(run.length) * elem);
    part = whole;
  }
  if (!pipeline()) return out;
  // Every parameter from the pipeline rank that holds it.
  std::map<std::string, Tensor> mine(out.begin(), out.end());
  NamedTensors all;
  for (const auto& [name, shape, owner] : whole_model_) {
    auto it = mine.find(name);
    Tensor t = it != mine.end() && pp_->rank() == owner ? contiguous(it->second) : Tensor::empty(shape);
    pp_->broadcast(t, owner)->wait();
    all.emplace_back(name, t);
  }
  return all;
}

std::vector<ParallelRun::WholeRange> ParallelRun::whole_ranges(const parallel::ParamPiece& p) const {
  auto it = tp_layout_.sharded.find(p.name);
  if (it == tp_layout_.sharded.end()) return {{p.begin, p.end, 0}};
  std::vector<WholeRange> out;
  for (const auto& run : it->second.runs(tp_->rank())) {
    const int64_t a = std::max(p.begin, run.local), b = std::min(p.end, run.local + run.length);
    if (a < b) out.push_back({run.whole + a - run.local, run.whole + b - run.local, a - p.begin});
  }
  return out;
}

const Shape& ParallelRun::whole_shape(const parallel::ParamPiece& p) const {
  auto it = tp_layout_.sharded.find(p.name);
  return it == tp_layout_.sharded.end() ? p.shape : it->second.whole_shape;
}

void ParallelRun::begin_micro_step(int64_t micro, int64_t grad_accum) {
  if (zero_) zero_->begin_micro_step(micro, grad_accum);
  if (ddp_) ddp_->set_gradient_sync(micro + 1 == grad_accum);
}

void ParallelRun::after_backward(int64_t micro, int64_t grad_accum) {
  if (zero_) zero_->after_backward(micro, grad_accum);
  if (ddp_ && micro + 1 == grad_accum) ddp_->finish_gradient_sync();
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
            copy_(narrow(whole, 0, p.begin, p.end - p.begin), reshape(p.gradient(), {p.end - p.begin}));
        pending.push_back(sum.group->all_reduce(whole, dist::ReduceOp::Sum));
        wholes.push_back(whole);
      }
      for (auto& w : pending) w->wait();
      size_t k = 0;
      for (const auto& name : sum.names) {
        for (const auto& p : pieces_)
          if (p.name == name && p.gradient().defined())
            copy_(p.gradient(), reshape(narrow(wholes[k], 0, p.begin, p.end - p.begin), p.gradient().shape()));
        ++k;
      }
    }
}

double ParallelRun::clip_grad_norm(double max_norm) {
  if (tp_->size() > 1 || pp_->size() > 1) {
    // Each element once: split parts add up over the tp ranks, whole parameters (the same on
    // every tp rank) count 1/tp per rank; pipeline stages add up, what both ends hold counts
    // half on each; ZeRO's shards add up over dp_shard.
    NoGradGuard no_grad;
    double local = 0;
    for (const auto& p : pieces_) {
      const Tensor g = p.gradient();
      if (!g.defined()) continue;
      const double sq = backend_for(g.device()).sum_squares(contiguous(to_dtype(g, DType::F32)));
      local += sq / (tp_sharded(p) ? 1.0 : double(tp_->size())) / (ends_shared_.count(p.name) ? 2.0 : 1.0);
    }
    Tensor t = from_vector(std::vector<float>{float(local)}, {1});
    if (zero_) mesh_.group("dp_shard")->all_reduce(t, dist::ReduceOp::Sum)->wait();
    tp_->all_reduce(t, dist::ReduceOp::Sum)->wait();
    pp_->all_reduce(t, dist::ReduceOp::Sum)->wait();
    const double norm = std::sqrt(double(t.data<float>()[0]));
    if (max_norm > 0 && norm > max_norm && std::isfinite(norm))
      for (const auto& p : pieces_)
        if (const Tensor g = p.gradient(); g.defined())
          backend_for(g.device()).axpby(g, g, max_norm / (norm + 1e-6), 0.0);
    return norm;
  }
  if (zero_) return zero_->clip_grad_norm(max_norm);
  std::vector<Tensor> tensors;
  for (const auto& p : pieces_) tensors.push_back(p.value);
  return optim::clip_grad_norm(tensors, max_norm);
}

void ParallelRun::after_optimizer_step() {
  if (zero_) zero_->sync_parameters();
}

void ParallelRun::zero_grad() {
  if (zero_) {
    zero_->zero_grad();
  } else {
    adamw_->zero_grad();
  }
}

namespace {

// What one rank stores of each tensor: every name with this rank's element ranges.
struct NamedPieces {
  std::string name_prefix, name_suffix;
  std::vector<Tensor> values;  // aligned with the pieces
};

std::vector<NamedPieces> checkpoint_contents(const optim::AdamW& optimizer,
                                             const std::vector<PieceState>& extra) {
  // The model first: a checkpoint of another model fails on its weights' names and shapes.
  std::vector<NamedPieces> out(1 + 2 + extra.size());
  out[0].name_prefix = "model/";  // values: the pieces themselves
  const auto moments = optimizer.named_state();  // exp_avg, exp_avg_sq per piece, in order
  std::vector<Tensor> m, v;
  for (size_t k = 0; k < moments.size(); k += 2) {
    m.push_back(moments[k].second);
    v.push_back(moments[k + 1].second);
  }
  out[1] = {"optimizer/", ".exp_avg", m};
  out[2] = {"optimizer/", ".exp_avg_sq", v};
  for (size_t i = 0; i < extra.size(); ++i) out[3 + i] = {extra[i].first + "/", "", extra[i].second};
  return out;
}

}  // namespace

std::string ParallelRun::save_checkpoint(const std::string& run_dir, int64_t step,
                                         const Json& state, const std::vector<PieceState>& extra,
                                         int64_t keep) {
  // Replicas hold the same pieces: replica q of Q writes the q-th part of each (the cp ranks
  // are replicas, and the tp ranks are of the parameters they do not split).
  const int64_t T = tp_->size();
  std::vector<TensorPiece> out;
  for (auto& contents : checkpoint_contents(*optimizer_, extra)) {
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const auto& p = pieces_[k];
      const bool split = tp_sharded(p);
      const int64_t t = split ? 0 : tp_->rank(), Tq = split ? 1 : T;
      // What both pipeline ends hold (maybe sharded differently): the first stage writes it.
      if (ends_shared_.count(p.name) && !pipeline_.first) continue;
      const int64_t q = (replicas_->rank() * cp_->size() + cp_->rank()) * Tq + t;
      const int64_t Q = replicas_->size() * cp_->size() * Tq;
      const Tensor& value = contents.values.empty() ? p.value : contents.values.at(k);
      for (const auto& range : whole_ranges(p)) {
        const int64_t n = range.end - range.begin, a = n * q / Q, b = n * (q + 1) / Q;
        if (a == b && n > 0) continue;
        out.push_back({contents.name_prefix + p.name + contents.name_suffix, whole_shape(p),
                       range.begin + a, range.begin + b,
                       value.as_strided({b - a}, {1}, value.offset() + range.offset + a)});
      }
    }
  }
  wait_checkpoint();
  if (!cfg_.train.async_checkpoint)
    return train::save_checkpoint(run_dir, step, *checkpoint_group_, out, state, keep);
  // A snapshot the step may overwrite meanwhile without changing what is written.
  for (auto& piece : out) {
    Tensor copy = Tensor::empty({piece.end - piece.begin}, piece.data.dtype(), cpu_device(),
                                MemCategory::Other);
    std::memcpy(copy.data_ptr(), piece.data.data_ptr(), copy.nbytes());
    piece.data = copy;
  }
  saver_ = std::thread([this, run_dir, step, out = std::move(out), state, keep] {
    try {
      train::save_checkpoint(run_dir, step, *checkpoint_group_, out, state, keep);
    } catch (...) {
      save_error_ = std::current_exception();
    }
  });
  return checkpoint_dir_name(run_dir, step);
}

void ParallelRun::load_checkpoint(const CheckpointReader& ckpt,
                                  const std::vector<PieceState>& extra) {
  for (auto& contents : checkpoint_contents(*optimizer_, extra)) {
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const auto& p = pieces_[k];
      const Tensor& value = contents.values.empty() ? p.value : contents.values.at(k);
      for (const auto& range : whole_ranges(p))
        ckpt.read(contents.name_prefix + p.name + contents.name_suffix, whole_shape(p),
                  range.begin, range.end,
                  value.as_strided({range.end - range.begin}, {1}, value.offset() + range.offset));
    }
  }
  if (zero_) zero_->sync_parameters();
}

std::vector<double> ParallelRun::sum_over_dp(const std::vector<double>& values) const {
  if (dp_size_ == 1) return values;
  std::vector<float> v(values.begin(), values.end());
  Tensor t = from_vector(v, {int64_t(v.size())});
  dp_->all_reduce(t, dist::ReduceOp::Sum)->wait();
  const std::vector<float> out = to_vector(t);
  return std::vector<double>(out.begin(), out.end());
}

}  // namespace loom::train
