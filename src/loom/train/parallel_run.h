// How a training run is spread over the job's processes: the device mesh, this rank's place
// on the data-parallel axes, tensor parallelism (with sequence parallelism) applied to the
// model by its plan, and the data-parallel strategy applied to this rank's parameters (DDP, or
// ZeRO-1/2/3 sharding, optionally hybrid with replicas).
//
// The trainers stay written for one process: they get their optimizer, the master weights
// this rank holds (for an EMA) and their share of the global batch from this object, call its
// hooks around backward and the optimizer step, and save and load checkpoints through it.
#pragma once
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "loom/checkpoint/json.h"
#include "loom/checkpoint/sharded.h"
#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/context_parallel.h"
#include "loom/parallel/ddp.h"
#include "loom/parallel/pipeline.h"
#include "loom/parallel/tensor_parallel.h"
#include "loom/parallel/zero.h"
#include "loom/train/config.h"

namespace loom::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// Per-piece tensors aligned with ParallelRun::pieces() under a name ("ema").
using PieceState = std::pair<std::string, std::vector<Tensor>>;

class ParallelRun {
 public:
  // Collective over the world: builds the mesh from [parallel]; checks that train.batch_size
  // splits evenly over the data-parallel ranks.
  explicit ParallelRun(const Config& cfg);
  ~ParallelRun();  // waits for a checkpoint being written

  bool main() const { return main_; }  // world rank 0: console, metrics, samples
  int64_t dp_rank() const { return dp_rank_; }
  int64_t dp_size() const { return dp_size_; }
  int64_t local_batch() const { return local_batch_; }  // this rank's share of a micro-batch
  const dist::DeviceMesh& mesh() const { return mesh_; }
  std::string describe() const;  // "4 processes (dp 4: zero2)"
  // Where this rank's metrics go: run_dir/metrics.jsonl (main rank), else
  // run_dir/logs/metrics-rank-R.jsonl (per-rank memory and timings).
  std::string metrics_path(const std::string& run_dir) const;

  // Applies pipeline parallelism (parallel.pp > 1: this rank keeps its stages' blocks and, on
  // the first and last stage, the plan's modules there; the rest leaves the model), tensor
  // parallelism (parallel.tp > 1) and context parallelism (parallel.cp > 1) by the model's
  // plan, then the data-parallel
  // strategy to the model (block_names: its blocks, ZeRO's flat groups and what ZeRO-2/3
  // wrap), makes every replica equal to rank 0's, and returns the optimizer the trainer
  // steps: AdamW over this rank's pieces.
  optim::AdamW& setup(nn::Module& model, const std::vector<std::string>& block_names,
                      const nn::ParallelPlan& plan, const optim::AdamWConfig& adamw);
  // Pipeline parallelism: the schedule and what this rank runs of it; null without.
  struct Pipeline {
    parallel::PipeSchedule schedule;
    std::vector<std::pair<int64_t, int64_t>> chunk_blocks;  // per chunk of this rank: blocks [b, e)
    bool first = false, last = false;                       // holds the first / last stage
    std::shared_ptr<dist::ProcessGroup> group;
  };
  const Pipeline* pipeline() const { return pipeline_.schedule.ranks > 1 ? &pipeline_ : nullptr; }
  // Context parallelism with a model that takes sequence shards (its plan says so): the rows of
  // a T-long sequence this rank feeds the model; empty when it takes whole sequences.
  std::vector<int64_t> sequence_rows(int64_t T) const;

  // The master weights this rank holds: whole parameters (one process, DDP) or its pieces of
  // the ZeRO shards -- of this rank's tensor-parallel part of each parameter (so `shape` is
  // that part's). As parameters (named "<param>[begin:end]" when partial) for an EMA.
  const std::vector<parallel::ParamPiece>& pieces() const { return pieces_; }
  std::vector<nn::NamedParameter> piece_parameters() const;
  // Whole tensors named as the parameters from per-piece values (collective under ZeRO and
  // tensor parallelism).
  NamedTensors gather_full(const std::vector<Tensor>& values);
  // The AdamW moments of this rank's pieces ("<piece>.exp_avg", ".exp_avg_sq", in order).
  NamedTensors optimizer_moments() const { return optimizer_->named_state(); }

  // Around each micro-step's backward: gradients are exchanged as the strategy says.
  void begin_micro_step(int64_t micro, int64_t grad_accum);
  void after_backward(int64_t micro, int64_t grad_accum);
  // One step's micro-batches through the pipeline schedule (gradients accumulate over them:
  // the last stage starts each backward from loss / micro-batches). Gradients stay local while
  // the passes run (ZeRO-2/3 reduce each block's as they always do) and are exchanged once
  // after. Returns the step's mean loss, on every rank.
  double run_pipeline_step(const parallel::PipelineStages& stages);
  // Global gradient norm (before clipping to max_norm, if > 0): over every parameter's whole
  // gradient, each counted once however it is split or replicated.
  double clip_grad_norm(double max_norm);
  void after_optimizer_step();
  void zero_grad();

  // Collective: writes run_dir/step-<step> (see checkpoint_dir.h): the model ("model/<name>"),
  // the AdamW moments ("optimizer/<name>.exp_avg", ".exp_avg_sq"), each extra per-piece state
  // ("ema/<name>") and trainer_state.json. Replicas split the writing of what they share.
  // With train.async_checkpoint the pieces are copied and written by a background thread while
  // training goes on (one checkpoint at a time: the next save waits for the previous one).
  // Returns the directory the checkpoint has (or will have).
  std::string save_checkpoint(const std::string& run_dir, int64_t step, const Json& state,
                              const std::vector<PieceState>& extra, int64_t keep);
  // Blocks until a checkpoint being written is complete; rethrows its error.
  void wait_checkpoint();
  // Checkpoints hold whole tensors' element ranges: a tensor-parallel part is written as the
  // ranges of the whole it covers, so any layout reads any other.
  // Reads this rank's pieces of all of the above from a checkpoint of any layout.
  void load_checkpoint(const CheckpointReader& ckpt, const std::vector<PieceState>& extra);

  // The ranks that hold the same pieces as this one (DDP: all dp ranks; HSDP: the replicas).
  dist::ProcessGroup& replicas() const { return *replicas_; }

  // Element-wise sum over the dp ranks (for losses and flags; f32 on the wire).
  std::vector<double> sum_over_dp(const std::vector<double>& values) const;

 private:
  const Config& cfg_;
  dist::DeviceMesh mesh_;
  std::shared_ptr<dist::ProcessGroup> dp_;
  std::shared_ptr<dist::ProcessGroup> replicas_;  // the ranks holding the same pieces
  std::shared_ptr<dist::ProcessGroup> tp_, cp_, pp_;
  bool sequence_shards_ = false;  // cp > 1 and the model takes sequence shards
  Pipeline pipeline_;
  std::shared_ptr<dist::ProcessGroup> ends_;  // the first and last pipeline ranks
  std::set<std::string> ends_shared_;         // parameters both ends hold (a tied embedding)
  // Every parameter of the whole model (name, shape) and the pipeline rank that has it.
  std::vector<std::tuple<std::string, Shape, int>> whole_model_;
  // A value the last pipeline stage computed (the loss), on every rank (itself without pp).
  double from_last_stage(double value) const;
  // Keeps this rank's stages, removes the rest from the model; returns the kept blocks.
  std::vector<std::string> setup_pipeline(nn::Module& model, const nn::ParallelPlan& plan);
  parallel::TensorParallelLayout tp_layout_;
  // Parameters whose gradients each rank of a group holds only its share of (used on sequence
  // shards under SP or CP): summed over that group after the data-parallel reduction.
  struct PartialSum {
    std::shared_ptr<dist::ProcessGroup> group;
    std::set<std::string> names;
    bool through_whole;  // the ranks hold different ranges of each: sum whole-size buffers
  };
  std::vector<PartialSum> partial_sums_;
  std::map<std::string, int64_t> local_numel_;  // this rank's parameters (after tp), by name
  // Where piece k's elements lie in the whole tensor: (begin, end, offset in the piece's value).
  struct WholeRange {
    int64_t begin, end, offset;
  };
  std::vector<WholeRange> whole_ranges(const parallel::ParamPiece& piece) const;
  const Shape& whole_shape(const parallel::ParamPiece& piece) const;
  bool tp_sharded(const parallel::ParamPiece& piece) const {
    return tp_layout_.sharded.count(piece.name) > 0;
  }
  // Checkpoint writing synchronises on a group of its own, so a background save never
  // interleaves its barriers with the training step's collectives.
  std::shared_ptr<dist::ProcessGroup> checkpoint_group_;
  std::thread saver_;
  std::exception_ptr save_error_;
  int64_t dp_rank_, dp_size_, local_batch_;
  bool main_;
  std::vector<parallel::ParamPiece> pieces_;
  optim::AdamW* optimizer_ = nullptr;
  std::unique_ptr<optim::AdamW> adamw_;  // 1 rank and ddp
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<parallel::ZeroDataParallel> zero_;
};

}  // namespace loom::train
