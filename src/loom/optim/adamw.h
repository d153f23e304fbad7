// AdamW with decoupled weight decay; state (exp_avg, exp_avg_sq) in f32 per parameter, where
// the parameter is or (AdamWConfig::offload) in host memory. With AdamWConfig::muon, the
// blocks' matrices (optim::muon_updates) take Muon's update instead: exp_avg holds their
// momentum and exp_avg_sq stays zero (so that checkpoints, their resharding and the replica
// checks see one form of state whichever update a parameter takes).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/nn/module.h"

namespace loom::optim {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied only to parameters marked weight_decay
  // The moments in host memory (ZeRO-Offload's optimizer state): a device run's step copies
  // each gradient and weight to the host, updates them there, and copies the weight back. On
  // the host already (train.device cpu) nothing moves.
  bool offload = false;
  // Muon (Jordan et al. 2024) for the 2-D weights of the blocks' Linear layers: Nesterov
  // momentum, orthogonalised by muon_steps Newton-Schulz iterations, scaled by 0.2 sqrt(max(rows,
  // cols)) so that its RMS matches AdamW's (Liu et al. 2025: one lr and weight decay for both).
  bool muon = false;
  double muon_momentum = 0.95;
  int muon_steps = 5;
};

class AdamW {
 public:
  AdamW(std::vector<nn::NamedParameter> params, AdamWConfig config);
  // With the moments given (views into buffers someone else owns, e.g. ZeRO's flat shards):
  // exp_avg[i] and exp_avg_sq[i] belong to params[i] and have its shape.
  AdamW(std::vector<nn::NamedParameter> params, std::vector<Tensor> exp_avg,
        std::vector<Tensor> exp_avg_sq, AdamWConfig config);
  // Parameters whose update may be deferred (nn::OptimizerParams::deferred: the parameter and
  // its moments in host memory, its owner waiting on the worker before using it): step()
  // copies their gradients to the host and posts their updates.
  AdamW(const nn::OptimizerParams& params, AdamWConfig config);
  ~AdamW();  // waits for updates posted
  // One update with learning rate lr for every parameter that has a gradient, each gradient
  // taken times grad_scale (clip_scale: clipping without a pass of its own).
  void step(double lr, double grad_scale = 1.0);
  void zero_grad();     // drops the gradients (the next backward allocates fresh ones)
  void settle() const;  // returns once every posted update has run
  int64_t steps_taken() const { return step_; }
  // State for checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq".
  std::vector<std::pair<std::string, Tensor>> named_state() const;
  void set_steps_taken(int64_t step) { step_ = step; }
  const AdamWConfig& config() const { return config_; }

 private:
  struct Slot {
    nn::NamedParameter param;
    Tensor exp_avg, exp_avg_sq;
    bool muon = false;            // Muon's update (exp_avg: its momentum)
    nn::DeferredUpdate deferred;  // worker null: updated within step()
    Tensor host_grad;             // deferred: the gradient the posted update reads
    nn::PieceOfParameter piece;   // with gather_wholes_: where it lies in its parameter
  };
  void update(Slot& s, const Tensor& grad, double lr, double grad_scale, int64_t step) const;
  // Muon's momentum of a slot's gradient (m = mu m + g, in place); returns the look-ahead
  // g + mu m (Nesterov) that is orthogonalised.
  Tensor muon_momentum(Slot& s, const Tensor& grad, double grad_scale) const;
  // w (the matrix, or its piece) -= lr (0.2 sqrt(max(rows, cols)) o + weight decay w), for o
  // the orthogonalised look-ahead (or its piece) of a matrix of shape `whole`.
  void apply_muon(const Slot& s, const Tensor& w, const Tensor& o, const Shape& whole,
                  double lr) const;
  // Muon on pieces of the matrices (ZeRO): each rank's momentum of its pieces, the look-ahead
  // gathered whole, orthogonalised, each rank's piece of the result applied.
  void muon_pieces_step(double lr, double grad_scale);
  nn::GatherWholes gather_wholes_;  // set when the parameters are pieces (and Muon is on)
  std::vector<Slot> slots_;
  AdamWConfig config_;
  int64_t step_ = 0;
};

// What an optimizer is built from: the parameters and, when someone else owns their moments'
// storage (ZeRO's flat shards), views of it aligned with them; empty: the optimizer allocates.
using OptimizerParams = nn::OptimizerParams;
std::unique_ptr<AdamW> make_adamw(const OptimizerParams& params, const AdamWConfig& config);

// Clipping by the global L2 norm, in two halves so that sharded training can sum the squares
// over its ranks in between (parallel::ParallelModel::clip_grad_norm).
// The sum of squares of the gradients, each scaled by weights[i] when given (a gradient every
// one of n ranks holds counts 1/n on each).
double grad_sum_squares(const std::vector<Tensor>& grads, const std::vector<double>& weights = {});
// The factor that clips gradients of global norm `norm` to max_norm: max_norm / norm when norm
// exceeds max_norm > 0 (and is finite), else 1.
double clip_scale(double norm, double max_norm);
// Scales the gradients by clip_scale(norm, max_norm) (a pass over them, unless that is 1).
void scale_grads_to_norm(const std::vector<Tensor>& grads, double norm, double max_norm);
// One process: the global L2 norm of the gradients of `params`.
double grad_norm(const std::vector<Tensor>& params);
// One process: scales all gradients of `params` so their global L2 norm is at most max_norm;
// returns the norm before clipping (max_norm <= 0: only measures).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace loom::optim
