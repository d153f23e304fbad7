// parallelize(): a plain single-device model spread over the job's mesh from outside, in one
// fixed order --
//   1. pipeline split   (pp > 1: this rank keeps its stages' blocks and, on the first and last
//                        stage, the plan's modules there; the rest leaves the model)
//   2. tensor parallel  (tp > 1: the plan's attention heads, column and row linears, the
//                        vocabulary; with sequence parallelism the residual stream's shards)
//   3. expert parallel  (ep > 1: each mixture's experts split over ep groups of dp ranks, the
//                        tokens dispatched to them by all-to-all)
//   4. context parallel (cp > 1: ring or Ulysses attention over the cp ranks)
//   5. activation checkpointing of the blocks
//   6. data parallel    (DDP, or ZeRO-1/2/3 over dp_shard, replicated over dp_replicate; the
//                        experts' gradients over the ranks that hold the same experts)
// Model parallelism comes first because it changes the parameters' shapes and its wrappers
// run inside the others' (a recompute or a ZeRO-3 gather wraps a whole model-parallel block);
// context parallelism's wrappers run outside tensor parallelism's (the sequence splits over cp
// first, each share then over tp). Recompute goes before ZeRO so that ZeRO-3's wrapper runs
// outside it (gathering before a recompute).
//
// The returned handle is what a trainer needs of the result: the master weights this rank holds
// (its pieces, for the optimizer built afterwards and for an EMA), the gradient exchange around
// backward, the global gradient norm, and where each piece lies in the whole tensors (for
// checkpoints any layout can read).
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"
#include "loom/nn/parallel_plan.h"
#include "loom/parallel/ddp.h"
#include "loom/parallel/expert_parallel.h"
#include "loom/parallel/pipeline.h"
#include "loom/parallel/tensor_parallel.h"
#include "loom/parallel/topology.h"
#include "loom/parallel/zero.h"

namespace loom::parallel {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Where part of one of this rank's pieces lies in its whole tensor: elements [begin, end) of
// the whole tensor (of shape whole_shape, as one process would hold it) are the piece's value's
// elements from `offset` on. A checkpoint holds whole tensors' element ranges, so any layout
// reads what any other wrote (train/checkpointer.cpp).
struct PieceSpan {
  size_t piece = 0;  // into ParallelModel::pieces()
  Shape whole_shape;
  int64_t begin = 0, end = 0, offset = 0;
};

// Pipeline parallelism: the schedule and what this rank runs of it.
struct Pipeline {
  PipeSchedule schedule;
  std::vector<std::pair<int64_t, int64_t>> chunk_blocks;  // per chunk of this rank: blocks [b, e)
  bool first = false, last = false;                       // holds the first / last stage
  std::shared_ptr<dist::ProcessGroup> group;
};

class ParallelModel {
 public:
  // The master weights this rank holds: whole parameters (one process, DDP) or its pieces of
  // the ZeRO shards -- of this rank's tensor-parallel part of each parameter (so `shape` is
  // that part's). Settled first (an offloaded ZeRO-3 step may still be updating them).
  const std::vector<ParamPiece>& pieces() const {
    settle();
    return pieces_;
  }
  // Returns once the optimizer's posted updates have run (ZeRO-3 with optim.offload overlaps
  // them with the next forward): before anything else reads or writes the master weights
  // through tensors of its own (an EMA).
  void settle() const;
  // As parameters (named "<param>[begin:end]" when partial), for an EMA.
  std::vector<nn::NamedParameter> piece_parameters() const;
  // What the optimizer is built from (optim::make_adamw): the pieces, and under ZeRO the
  // storage of their moments in its flat shards.
  nn::OptimizerParams optimizer_params() const;
  const Pipeline* pipeline() const { return pipeline_.schedule.ranks > 1 ? &pipeline_ : nullptr; }
  // Context parallelism with a model that takes sequence shards (its plan says so): the rows
  // of a T-long sequence this rank feeds the model; empty when it takes whole sequences.
  std::vector<int64_t> sequence_rows(int64_t T) const;
  // The ranks that hold the same pieces as this one (DDP: all dp ranks; HSDP: the replicas;
  // with expert parallelism and DDP: those of them holding the same experts).
  dist::ProcessGroup& replicas() const { return edp_ && !zero_ ? *edp_ : *replicas_; }
  // Whether every rank of replicas() holds piece k alike (not an expert's ZeRO shard, which
  // spreads over all the ranks holding that expert, across HSDP's replicas).
  bool replicated(size_t k) const { return !(zero_experts_ && ep_sharded(pieces_[k])); }
  // Whether every rank of this rank's tp group holds piece k alike: a parameter tensor
  // parallelism does not split (a norm, a bias of a row-parallel layer), nor an expert's.
  bool held_alike_over_tp(size_t k) const {
    return !tp_sharded(pieces_[k]) && !ep_sharded(pieces_[k]);
  }
  // The ZeRO instances' shard groups (several ranks each) with this rank's hash of its gathered
  // copies of their parameters (ZeroDataParallel::copies_hash): the ranks of each group must
  // agree. Collective over those groups.
  std::vector<std::pair<dist::ProcessGroup*, uint64_t>> zero_copies() const;
  std::string describe() const;  // "4 processes (dp 4: zero2)"

  // The step. Around each micro-step's backward the gradients are exchanged as the strategy
  // says; after the last one every piece's gradient is complete.
  void begin_micro_step(int64_t micro, int64_t grad_accum);
  void after_backward(int64_t micro, int64_t grad_accum);
  // One step's micro-batches through the pipeline schedule (gradients accumulate over them:
  // the last stage starts each backward from loss / micro-batches). Gradients stay local
  // while the passes run (ZeRO-2/3 reduce each block's as they always do) and are exchanged
  // once after. Returns the step's mean loss, on every rank.
  double run_pipeline_step(const PipelineStages& stages);
  // Per pipeline rank: the share of its pipeline steps' time it waited for another rank
  // (collective over the pipeline group).
  std::vector<double> pipeline_waiting() const;
  // Global gradient norm: over every parameter's whole gradient, each element counted once
  // however it is split or replicated. Clipping is the optimizer's.
  double grad_norm();
  // After the pieces changed (an optimizer step, a checkpoint loaded): the full parameters
  // follow them (ZeRO).
  void sync_parameters();
  void zero_grad();

  // Every element range of this rank's pieces in their whole tensors (what loading reads);
  // share: only this rank's share of what its replicas hold alike (what saving writes, each
  // element once).
  std::vector<PieceSpan> piece_spans(bool share) const;
  // Whole tensors named as the parameters from per-piece values (collective over the mesh).
  NamedTensors gather_full(const std::vector<Tensor>& values);

 private:
  friend std::unique_ptr<ParallelModel> parallelize(nn::Module&, const nn::ParallelPlan&,
                                                    const dist::DeviceMesh&, const Topology&,
                                                    int64_t);
  ParallelModel(const dist::DeviceMesh& mesh, const Topology& topology);
  std::vector<std::string> split_pipeline(nn::Module& model, const nn::ParallelPlan& plan,
                                          int64_t micro_batches);
  double from_last_stage(double value) const;  // the last stage's value, on every rank
  // Where this rank's part of a parameter (after tensor and expert parallelism) lies in the
  // whole tensor of whole_numel elements.
  std::vector<nn::ElementRun> local_runs(const std::string& name, int64_t whole_numel) const;
  // Where a piece's elements lie in the whole tensor: (begin, end, offset in the piece's value).
  struct WholeRange {
    int64_t begin, end, offset;
  };
  std::vector<WholeRange> whole_ranges(const ParamPiece& piece) const;
  const Shape& whole_shape(const ParamPiece& piece) const;
  bool tp_sharded(const ParamPiece& piece) const {
    return tp_layout_.sharded.count(piece.name) > 0;
  }
  bool ep_sharded(const ParamPiece& piece) const {
    return ep_layout_.sharded.count(piece.name) > 0;
  }
  // Whole tensors from every rank's part of the shards of `layout` over `group`.
  void gather_shards(NamedTensors& tensors, const std::map<std::string, TensorShard>& layout,
                     dist::ProcessGroup& group) const;

  const dist::DeviceMesh& mesh_;
  const Topology topology_;
  std::shared_ptr<dist::ProcessGroup> dp_, replicas_, tp_, cp_, pp_;
  bool sequence_shards_ = false;  // cp > 1 and the model takes sequence shards
  Pipeline pipeline_;
  PipelineTimes pipeline_times_;              // this rank's, over the run
  std::shared_ptr<dist::ProcessGroup> ends_;  // the first and last pipeline ranks
  std::set<std::string> ends_shared_;         // parameters both ends hold (a tied embedding)
  // Every parameter of the whole model (name, shape) and the pipeline rank that has it.
  std::vector<std::tuple<std::string, Shape, int>> whole_model_;
  TensorParallelLayout tp_layout_;
  // Expert parallelism: ep_ the ranks that split the experts, edp_ those holding the same ones.
  std::shared_ptr<dist::ProcessGroup> ep_, edp_;
  ExpertParallelLayout ep_layout_;
  // Parameters whose gradients each rank of a group holds only its share of (used on sequence
  // shards under SP or CP, or by both pipeline ends): summed over that group after the
  // data-parallel reduction.
  struct PartialSum {
    std::shared_ptr<dist::ProcessGroup> group;
    std::set<std::string> names;
    bool through_whole;  // the ranks hold different ranges of each: sum whole-size buffers
  };
  std::vector<PartialSum> partial_sums_;
  std::map<std::string, int64_t> local_numel_;  // this rank's parameters (after tp), by name
  std::vector<ParamPiece> pieces_;
  std::unique_ptr<DistributedDataParallel> ddp_, ddp_experts_;  // the experts' over edp_
  std::unique_ptr<ZeroDataParallel> zero_, zero_experts_;       // the experts' sharded over edp_
  size_t shared_pieces_ = 0;  // pieces_: zero_'s first, then zero_experts_' (ZeRO with ep)
};

// Collective over mesh.world(). micro_batches: a pipeline step's (the trainer's grad_accum).
std::unique_ptr<ParallelModel> parallelize(nn::Module& model, const nn::ParallelPlan& plan,
                                           const dist::DeviceMesh& mesh, const Topology& topology,
                                           int64_t micro_batches);

}  // namespace loom::parallel
