// The mixture-of-experts layers of a model (nn/moe.h) as the training loop sees them: each
// step's expert loads summed over the data-parallel ranks, the aux-loss-free bias update from
// them, the step's metrics, and the selection biases in the checkpoint. A model without a
// mixture makes every call a no-op.
#pragma once
#include <string>
#include <vector>

#include "loom/core/json.h"
#include "loom/dist/process_group.h"
#include "loom/nn/moe.h"

namespace loom::train {

class MoeBalance {
 public:
  // token_groups: the groups whose ranks route different tokens (dp; tp too with sequence
  // parallelism), whose loads add up. loss_scale: what each forward's balancing losses are
  // multiplied by so that they weigh as the loss does (1 / micro-steps, and 1 / tp with
  // sequence parallelism, whose ranks' gradients are summed, not averaged).
  MoeBalance(nn::Module& model, std::vector<dist::ProcessGroup*> token_groups, double loss_scale);
  bool active() const { return !layers_.empty(); }

  void begin_step();
  // After the optimizer step (updated: it was not skipped). Collective over dp.
  void end_step(bool updated);
  // The last step's figures: per layer the tokens per expert (all ranks), max / mean load,
  // the unweighted auxiliary and z losses and the router entropy; "max_over_mean" over layers.
  Json metrics() const { return metrics_; }
  std::string summary() const;  // for the progress line: "moe load max/mean 1.21, aux 1.02"

  // {"moe_selection_bias": {"blocks.1.mlp": [..]}} (exact: floats survive JSON's doubles).
  Json state() const;
  void resume(const Json& trainer_state);

 private:
  std::vector<std::pair<std::string, nn::MoE*>> layers_;
  std::vector<dist::ProcessGroup*> token_groups_;
  Json metrics_;
  double max_over_mean_ = 0, aux_ = 0;
};

// The selection biases of a checkpoint's trainer_state.json into a model built from its
// config: what evaluating or sampling a checkpoint needs besides the weights (nothing to do
// for a model without a mixture).
void load_selection_biases(nn::Module& model, const std::string& ckpt_dir);

}  // namespace loom::train
