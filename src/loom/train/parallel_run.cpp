#include "loom/train/parallel_run.h"

#include <sstream>

#include "loom/checkpoint/state_dict.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"

namespace loom::train {

ParallelRun::ParallelRun(const Config& cfg)
    : cfg_(cfg),
      mesh_(dist::init_world({cfg.parallel.timeout_s}), cfg.parallel.dims),
      dp_(mesh_.group("dp")),
      dp_rank_(dp_->rank()),
      dp_size_(dp_->size()),
      local_batch_(cfg.train.batch_size / dp_size_),
      main_(mesh_.world()->rank() == 0) {
  LOOM_CHECK(cfg.train.batch_size % dp_size_ == 0)
      << "train.batch_size " << cfg.train.batch_size << " (the global batch) does not split "
      << "evenly over " << dp_size_ << " data-parallel ranks";
}

std::string ParallelRun::describe() const {
  std::ostringstream s;
  const int n = mesh_.world()->size();
  if (n == 1) return "1 process";
  s << n << " processes (dp " << dp_size_;
  if (mesh_.degree("dp_replicate") > 1)
    s << " = " << mesh_.degree("dp_replicate") << " replicas x " << mesh_.degree("dp_shard")
      << " shards";
  s << ": " << cfg_.parallel.data_parallel << ")";
  return s.str();
}

optim::AdamW& ParallelRun::setup(const std::vector<nn::NamedParameter>& params,
                                 const std::vector<std::string>& block_names,
                                 const optim::AdamWConfig& adamw) {
  params_ = params;
  const std::string& strategy = cfg_.parallel.data_parallel;
  if (strategy == "zero1" || strategy == "zero2") {
    // Sharded over dp_shard, replicated over dp_replicate (HSDP when both exceed 1).
    zero_ = std::make_unique<parallel::ZeroDataParallel>(
        parallel::group_by_prefix(params, block_names), strategy == "zero1" ? 1 : 2,
        mesh_.group("dp_shard"), mesh_.group("dp_replicate"), adamw);
    if (dp_size_ > 1) zero_->broadcast_parameters();
    return zero_->optimizer();
  }
  adamw_ = std::make_unique<optim::AdamW>(params, adamw);
  if (dp_size_ > 1) {  // one data-parallel rank needs no wrapper: the step stays as it is
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(
        params, dp_, int64_t(cfg_.parallel.bucket_mb * 1024 * 1024));
    ddp_->broadcast_parameters(0);
  }
  return *adamw_;
}

void ParallelRun::begin_micro_step(int64_t micro, int64_t grad_accum) {
  if (zero_) zero_->begin_micro_step(micro, grad_accum);
  if (ddp_) ddp_->set_gradient_sync(micro + 1 == grad_accum);
}

void ParallelRun::after_backward(int64_t micro, int64_t grad_accum) {
  if (zero_) zero_->after_backward(micro, grad_accum);
  if (ddp_ && micro + 1 == grad_accum) ddp_->finish_gradient_sync();
}

double ParallelRun::clip_grad_norm(double max_norm) {
  if (zero_) return zero_->clip_grad_norm(max_norm);
  std::vector<Tensor> tensors;
  for (const auto& p : params_) tensors.push_back(p.tensor);
  return optim::clip_grad_norm(tensors, max_norm);
}

void ParallelRun::after_optimizer_step() {
  if (zero_) zero_->after_optimizer_step();
}

void ParallelRun::zero_grad() {
  if (zero_) {
    zero_->zero_grad();
  } else {
    adamw_->zero_grad();
  }
}

NamedTensors ParallelRun::optimizer_state() {
  return zero_ ? zero_->full_optimizer_state() : adamw_->named_state();
}

void ParallelRun::load_optimizer_state(const std::map<std::string, Tensor>& state,
                                       const std::string& source) {
  if (zero_) {
    zero_->load_full_optimizer_state(state, source);
  } else {
    load_named(adamw_->named_state(), state, source);
  }
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
