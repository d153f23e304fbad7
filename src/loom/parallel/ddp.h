// DistributedDataParallel: every rank holds the whole model, gradients are averaged.
//
// Parameters are grouped into buckets of about `bucket_bytes`, in reverse registration order
// (roughly the order backward produces their gradients). A post-accumulate hook on each
// parameter counts the gradients that are ready; when a bucket is complete it is packed into
// one flat buffer and all-reduced (average) on the communication thread while backward goes on
// with the layers below. finish_gradient_sync() waits for the buckets and writes the averages
// back, so every rank ends the step with identical gradients. A parameter whose gradient is
// accumulated again after its bucket left (a weight used twice) has its bucket reduced again.
#pragma once
#include <memory>
#include <vector>

#include "loom/dist/process_group.h"
#include "loom/nn/module.h"

namespace loom::parallel {

class DistributedDataParallel {
 public:
  DistributedDataParallel(const std::vector<nn::NamedParameter>& params,
                          std::shared_ptr<dist::ProcessGroup> group, int64_t bucket_bytes);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Copies rank `root`'s parameters to every rank (after init or a checkpoint load).
  void broadcast_parameters(int root = 0);
  // false for the micro-steps of gradient accumulation before the last: gradients stay local.
  void set_gradient_sync(bool sync);
  // After the last backward of a step: every gradient holds the average over the group.
  void finish_gradient_sync();

  int64_t num_buckets() const;
  const dist::ProcessGroup& group() const { return *group_; }

  struct State;  // shared with the hooks (which outlive this object inside the parameters)

 private:
  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<State> state_;
};

}  // namespace loom::parallel
