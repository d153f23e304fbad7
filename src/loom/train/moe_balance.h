// The mixture-of-experts layers of a model (nn/moe.h) as the training loop sees them: each
// step's expert loads summed over the data-parallel ranks, the aux-loss-free bias update from
// them, the step's metrics, and the selection biases in the checkpoint. A model without a
// mixture makes every call a no-op.
//
// Under DiLoCo the loads are summed inside each worker only (nothing crosses the slow link
// between outer steps), so each worker's biases follow its own loads during a round and are
// averaged over the workers at its end, like the weights.
#pragma once
#include <string>
#include <vector>

#include "loom/core/json.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/process_group.h"
#include "loom/nn/moe.h"

namespace loom::train {

class MoeBalance {
 public:
  // token_groups: the groups whose ranks route different tokens (dp; tp too with sequence
  // parallelism), whose loads add up. loss_scale: what each forward's balancing losses are
  // multiplied by so that they weigh as the loss does (1 / micro-steps, and 1 / tp with
  // sequence parallelism, whose ranks' gradients are summed, not averaged).
  // workers: under DiLoCo, the ranks holding the same pieces in each worker (dp_replicate);
  // token_groups are then the worker's own.
  MoeBalance(nn::Module& model, std::vector<dist::ProcessGroup*> token_groups, double loss_scale,
             dist::ProcessGroup* workers = nullptr);
  // Every mixture layer of the whole model, by path, and its expert count: under a pipeline
  // a stage holds some of them, and the checkpoint's state has all (gathered over `stages`).
  using Layers = std::vector<std::pair<std::string, int64_t>>;
  // A run's on `mesh`: the dp ranks route different tokens (a DiLoCo worker's own: dp_shard,
  // the workers dp_replicate), and with sequence parallelism the tp ranks too, and the cp
  // ranks; each forward's losses weigh 1 / grad_accum (and 1 / tp with sequence parallelism,
  // 1 / cp: those ranks' gradients are summed, not averaged).
  // whole: the layers of the model before the pipeline split (whole_layers()).
  MoeBalance(nn::Module& model, const dist::DeviceMesh& mesh, bool sequence_parallel,
             int64_t grad_accum, bool diloco, Layers whole);
  static Layers whole_layers(nn::Module& model);
  bool active() const { return !whole_.empty(); }

  void begin_step();
  // After the optimizer step (updated: it was not skipped). Collective over the token groups.
  void end_step(bool updated);
  // DiLoCo, at the end of an outer round: every worker's selection biases become their average.
  // Collective over the workers.
  void average_over_workers();
  // The last step's figures: per layer the tokens per expert (over the token groups: under
  // DiLoCo this worker's ranks), max / mean load, the unweighted auxiliary and z losses and the
  // router entropy; "max_over_mean" over layers.
  Json metrics() const { return metrics_; }
  std::string summary() const;  // for the progress line: "moe load max/mean 1.21, aux 1.02"

  // {"moe_selection_bias": {"blocks.1.mlp": [..]}} (exact: floats survive JSON's doubles).
  // Under DiLoCo also "moe_selection_bias_workers": every worker's, in worker order (they part
  // between outer steps), and moe_selection_bias is worker 0's, whose weights the checkpoint
  // holds as the model. Collective over the workers then, and over the pipeline stages.
  Json state() const;
  void resume(const Json& trainer_state);

 private:
  std::vector<std::pair<std::string, nn::MoE*>> layers_;  // this rank's
  Layers whole_;
  std::vector<dist::ProcessGroup*> token_groups_;
  dist::ProcessGroup* workers_;           // DiLoCo's, or nullptr
  dist::ProcessGroup* stages_ = nullptr;  // the pipeline's, or nullptr
  Json metrics_;
  double max_over_mean_ = 0, aux_ = 0;
};

// The selection biases of a checkpoint's trainer_state.json into a model built from its
// config: what evaluating or sampling a checkpoint needs besides the weights (nothing to do
// for a model without a mixture).
void load_selection_biases(nn::Module& model, const std::string& ckpt_dir);

}  // namespace loom::train
