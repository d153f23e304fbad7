// ZeRO stages 1, 2 and 3 (optimizer state, then gradients, then parameters sharded over the
// data-parallel ranks), with an optional replicate axis (HSDP: shard over dp_shard, replicate
// over dp_replicate).
//
// The parameters are split into groups, one per unit -- a module whose forward ZeRO wraps
// (through Module::call, see nn/module.h): the transformer blocks and the modules at the
// model's ends (embeddings, final norm, head), in forward order -- plus one for parameters of
// no unit. Each group moves into one flat buffer, padded to a multiple of the shard count;
// rank r owns elements [r S, (r + 1) S) of every group. The model's parameter tensors become
// views of the flat buffers, so the model code does not change.
//
//   stage 1: gradients accumulate in a full flat buffer per group; after the last micro-step
//            each group is reduce-scattered (average) as soon as backward has produced it.
//   stage 2: a unit's flat gradient buffer exists only from the start of the unit's backward
//            (a hook on its output) until its reduce-scatter has finished; every micro-step is
//            reduced and added into the owned shard.
//   stage 3: as stage 2, and a unit's full parameters exist only while it runs: they are
//            all-gathered (f32, or bf16 on the wire) before its forward, with the next unit's
//            gather started meanwhile (prefetch), freed after it, gathered again when its
//            backward starts (prefetching the unit before it), and freed when its gradients
//            are complete. The last unit stays gathered from its forward to its backward. A
//            module using a unit's parameters (a tied head: ZeroOptions::unit_users) gathers
//            them around its own forward and backward alike. The master weights are the f32
//            shard (in host memory with ZeroOptions::offload_optimizer), and at build only the
//            shard is filled (ZeroOptions::initial_values): no rank ever holds
//            a whole model. Parameters of no unit stay gathered.
//
// The optimizer (AdamW) updates only the owned shard: its moments exist for 1/S of the
// elements. Gradient clipping measures the global norm from the pieces (parallel/parallelize.h).
//
// Blocks are wrapped through Module::call (see nn/module.h); a block parameter must be used
// once per forward (a second use after its gradient is complete would find it freed).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/dist/process_group.h"
#include "loom/nn/module.h"

namespace loom::parallel {

// A contiguous range of one parameter's elements that this rank holds: the whole parameter
// without sharding, a piece of it in a ZeRO shard.
struct ParamPiece {
  std::string name;   // the parameter's full name
  Shape shape;        // its full shape
  int64_t begin = 0;  // the range [begin, end) of its row-major elements
  int64_t end = 0;
  Tensor value;  // those end - begin elements (contiguous f32)
  bool weight_decay = true;
  // ZeRO: their gradient (a view of the shard's gradient buffer); otherwise undefined and the
  // gradient is value.grad().
  Tensor grad;
  Tensor gradient() const { return grad.defined() ? grad : value.grad(); }
};

struct ZeroOptions {
  int stage = 1;
  // Stage 3: what parameters travel as (F32 or BF16); stages 1-2 offloaded from a device: also
  // the device's copy of them.
  DType gather_dtype = DType::F32;
  // Parameters this instance leaves alone (another one shards them over another group: the
  // experts under expert parallelism).
  std::set<std::string> skip{};
  // The optimizer's state in host memory (optim.offload, ZeRO-Offload): AdamW's moments of the
  // shard and its f32 master. Stage 3's update then runs on a host thread, piece by piece in
  // forward order, while the next forward goes on: each unit's gather waits for its own
  // pieces' updates and uploads them (as the gather dtype) into a device copy of the shard.
  // Under stages 1-2 on a device the update is synchronous and uploads the shard into the
  // device's copy of the parameters (all-gathered after): with a bf16 gather dtype that copy
  // is bf16 and a unit's f32 parameters exist only while it runs, converted from it. Stages
  // 1-2 on the host keep the master a view of the parameters (a copy would free nothing).
  bool offload_optimizer = false;
  // Modules that use a unit's parameters in a forward of their own (a tied output head: the
  // token embedding's weight): module path -> unit.
  std::map<std::string, std::string> unit_users{};
  // The values of a parameter that has no memory yet (a deferred build): fills dst with its
  // (tensor-parallel part's) elements from local_begin on. Only this rank's shard is filled:
  // stage 3 never holds a whole group at build.
  std::function<void(const std::string& name, const Tensor& dst, int64_t local_begin)>
      initial_values{};
};

class ZeroDataParallel {
 public:
  // model: where the units named by unit_names (in forward order) live; stages 2 and 3 wrap
  // their forward.
  // shard: the group the state is sharded over; replicate: size 1, or the HSDP replicas.
  ZeroDataParallel(nn::Module& model, const std::vector<std::string>& unit_names,
                   ZeroOptions options, std::shared_ptr<dist::ProcessGroup> shard,
                   std::shared_ptr<dist::ProcessGroup> replicate);
  ~ZeroDataParallel();
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  // What the optimizer is built from: this rank's pieces (named "<name>[begin:end]", in the
  // order of pieces(), their gradients bound to the shard's) and their moments' storage in
  // the flat shards.
  const nn::OptimizerParams& optimizer_params() const { return optimizer_params_; }
  // This rank's master weights: one piece per parameter that overlaps its shard.
  const std::vector<ParamPiece>& pieces() const { return pieces_; }
  // Returns once the optimizer's posted updates of the pieces have run (offloaded stage 3):
  // before anything but the next forward reads or writes them.
  void settle() const;

  void broadcast_parameters();  // every replica takes world rank 0's values
  void begin_micro_step(int64_t micro, int64_t grad_accum);
  void after_backward(int64_t micro, int64_t grad_accum);
  // After the master pieces changed (optimizer step, checkpoint load): the full parameters
  // follow (stages 1 and 2 all-gather; stage 3 frees the blocks, gathered again when used).
  void sync_parameters();
  void zero_grad();

  // Full tensors (named as the parameters) from per-piece values aligned with pieces() --
  // the master weights, a moment, an EMA. Collective over the shard group.
  std::vector<std::pair<std::string, Tensor>> gather_full(const std::vector<Tensor>& values);

  // A hash of the parameters as this rank's gathered copies hold them (the replicas' and
  // gathers' silent-corruption check, train/step_guard.h): under stages 1-2 the full
  // parameters it computes with, each element all-gathered from the rank that owns it; under
  // stage 3 (released between uses) the groups gathered again, one at a time, from the shards
  // the forward gathers. Every rank of the shard group holds the same copies: a rank whose hash
  // differs received, or kept, another value than the owner sent. Collective under stage 3.
  uint64_t copies_hash();

  struct Group;
  struct Shared;

 private:
  std::shared_ptr<dist::ProcessGroup> shard_, replicate_;
  std::shared_ptr<Shared> shared_;  // what the hooks and forward wrappers see
  std::vector<ParamPiece> pieces_;
  std::vector<std::pair<size_t, int64_t>> piece_at_;  // (group, offset in its shard) per piece
  std::vector<nn::Module*> wrapped_;
  nn::OptimizerParams optimizer_params_;
};

}  // namespace loom::parallel
