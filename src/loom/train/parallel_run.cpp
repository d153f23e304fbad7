#include "loom/train/parallel_run.h"

#include <sstream>

#include "loom/dist/world.h"
#include "loom/ops/ops.h"

namespace loom::train {

ParallelRun::ParallelRun(const Config& cfg)
    : mesh_(dist::init_world({cfg.parallel.timeout_s}), cfg.parallel.dims),
      dp_(mesh_.group("dp")),
      dp_rank_(dp_->rank()),
      dp_size_(dp_->size()),
      local_batch_(cfg.train.batch_size / dp_size_),
      main_(mesh_.world()->rank() == 0),
      bucket_bytes_(int64_t(cfg.parallel.bucket_mb * 1024 * 1024)) {
  LOOM_CHECK(cfg.train.batch_size % dp_size_ == 0)
      << "train.batch_size " << cfg.train.batch_size << " (the global batch) does not split "
      << "evenly over " << dp_size_ << " data-parallel ranks";
}

std::string ParallelRun::describe() const {
  std::ostringstream s;
  const int n = mesh_.world()->size();
  s << n << (n == 1 ? " process" : " processes") << " (dp " << dp_size_ << ": ddp)";
  return s.str();
}

// One data-parallel rank needs no wrapper: the single-process step stays as it is.
void ParallelRun::attach(const std::vector<nn::NamedParameter>& params) {
  if (dp_size_ == 1) return;
  ddp_ = std::make_unique<parallel::DistributedDataParallel>(params, dp_, bucket_bytes_);
  ddp_->broadcast_parameters(0);
}

void ParallelRun::begin_micro_step(int64_t micro, int64_t grad_accum) {
  if (ddp_) ddp_->set_gradient_sync(micro + 1 == grad_accum);
}

void ParallelRun::finish_gradients() {
  if (ddp_) ddp_->finish_gradient_sync();
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
