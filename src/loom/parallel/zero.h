// ZeRO stages 1 and 2 (optimizer state, then gradients, sharded over the data-parallel ranks),
// with an optional replicate axis (HSDP: shard over dp_shard, replicate over dp_replicate).
//
// The parameters are split into groups (one per transformer block plus one for the rest) and
// each group moves into one flat buffer, padded to a multiple of the shard count; rank r owns
// elements [r S, (r + 1) S) of every group. The model's parameter tensors become views of the
// flat buffers, so the model code does not change and the all-gather after the optimizer step
// writes straight into them.
//
//   stage 1: gradients accumulate in a full flat buffer per group; after the last micro-step
//            each group is reduce-scattered (average) as soon as backward has produced it.
//   stage 2: every micro-step's groups are packed into a flat buffer as soon as backward has
//            produced them (the parameters' own gradients are dropped), reduce-scattered,
//            added into the shard and freed: full gradients live only for groups in flight.
//
// The optimizer (AdamW) updates only the owned shard: its moments exist for 1/S of the
// elements. Gradient clipping measures the global norm from the shards (one all-reduce).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/dist/process_group.h"
#include "loom/nn/module.h"
#include "loom/optim/adamw.h"

namespace loom::parallel {

// Splits parameters into the groups ZeRO flattens: one per prefix (the parameters named
// "<prefix>.*"), then one group of all others, in their original order (empty groups dropped).
std::vector<std::vector<nn::NamedParameter>> group_by_prefix(
    const std::vector<nn::NamedParameter>& params, const std::vector<std::string>& prefixes);

class ZeroDataParallel {
 public:
  // shard: the group the state is sharded over; replicate: size 1, or the HSDP replicas.
  ZeroDataParallel(const std::vector<std::vector<nn::NamedParameter>>& groups, int stage,
                   std::shared_ptr<dist::ProcessGroup> shard,
                   std::shared_ptr<dist::ProcessGroup> replicate, optim::AdamWConfig config);
  ~ZeroDataParallel();
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  // AdamW over this rank's shard (parameter names "<name>[lo:hi]" for element ranges).
  optim::AdamW& optimizer() { return *optimizer_; }

  void broadcast_parameters();  // every replica takes world rank 0's values
  void begin_micro_step(int64_t micro, int64_t grad_accum);
  void after_backward(int64_t micro, int64_t grad_accum);
  double clip_grad_norm(double max_norm);  // global norm before clipping
  void after_optimizer_step();             // all-gathers the updated shards
  void zero_grad();

  // The optimizer state in the single-process layout ("<param>.exp_avg", "<param>.exp_avg_sq",
  // full shapes), gathered from the shards: collective over the shard group.
  std::vector<std::pair<std::string, Tensor>> full_optimizer_state();
  // Takes this rank's shard of a full (single-process layout) optimizer state.
  void load_full_optimizer_state(const std::map<std::string, Tensor>& state,
                                 const std::string& source);

  struct Group;

 private:
  struct Shared;
  int stage_;
  std::shared_ptr<dist::ProcessGroup> shard_, replicate_;
  std::shared_ptr<Shared> shared_;  // what the gradient hooks see
  std::unique_ptr<optim::AdamW> optimizer_;
};

}  // namespace loom::parallel
