// Mixture of experts (plain single-device code, no collectives): a router picks the top k of E
// experts for every token, the tokens are sorted by expert and each expert runs as one GEMM of
// its own group's size (dropless: no capacity, no dropped tokens), and each token's output is
// its experts' outputs weighted by their gates. Balancing: the Switch auxiliary loss, the router
// z-loss and DeepSeek-V3's auxiliary-loss-free selection bias, each weighted from the config.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/nn/layers.h"

namespace loom::nn {

enum class MoeGating { Softmax, Sigmoid };

struct MoeConfig {
  int64_t experts = 0;  // E; 0: no mixture (the model's dense MLP)
  int64_t top_k = 2;    // k experts per token
  MoeGating gating = MoeGating::Softmax;
  bool renormalize = true;     // the k gates divided by their sum (sigmoid gating: always)
  int64_t hidden = 0;          // each expert's hidden size (the model fills in its default)
  int64_t shared_experts = 0;  // always-on experts (DeepSeek-MoE): one MLP of this x hidden
  bool swiglu = true;          // SwiGLU experts, else GELU (tanh) ones
  double aux_loss = 0;         // weight of the Switch load-balancing loss
  double z_loss = 0;           // weight of the router z-loss
  double bias_rate = 0;        // aux-loss-free balancing: the bias step per update (0: off)
  int64_t every = 1;           // in a model: blocks i with (i + 1) % every == 0 get the mixture
  // One clear error for a mixture that cannot be built (k > E, ...).
  // depth > 0: the model's blocks, of which every `every`-th is a mixture; at least one must be
  // (a model that asks for experts and gets none would train dense under a banner of experts).
  void validate(int64_t depth = 0) const;
  bool enabled() const { return experts > 0; }
  // Parameters of one expert for a model of `dim` channels (its GEMMs' weights).
  int64_t expert_parameters(int64_t dim) const { return (swiglu ? 3 : 2) * dim * hidden; }
};

// What the forwards recorded for training (autograd on) saw since reset_stats(): a
// checkpointed block's recompute counts, its no-grad forward and evaluation do not.
struct MoeStats {
  std::vector<int64_t> load;  // (E) token assignments per expert
  int64_t tokens = 0;         // tokens routed (each to k experts)
  double aux_loss = 0;        // sums over the forwards of each forward's value
  double z_loss = 0;          //   (the unweighted losses)
  double entropy = 0;         //   (the mean entropy of the router's distribution, nats)
  int64_t forwards = 0;
};

class MoE : public Module {
 public:
  // init: of the router and the experts' matrices (xavier from each expert's (out, in)).
  MoE(int64_t dim, const MoeConfig& config, Init init = Init::normal(0.02f));
  Tensor forward(const Tensor& x) const;  // (..., dim) -> (..., dim)

  // The experts on the routed tokens: xs (N k, dim) sorted by expert, sizes[e] rows for expert
  // e of all E -> their outputs (N k, dim), unweighted. Unset: this module's own experts.
  // Expert parallelism (parallel/expert_parallel.h) sets one that sends each expert's rows to
  // the rank holding it and brings the results back.
  using ExpertsFn = std::function<Tensor(const Tensor& xs, const std::vector<int64_t>& sizes)>;
  ExpertsFn experts;
  // The experts this module holds (its w1/w3/w2, maybe a share of all) on rows grouped by them.
  Tensor local_experts(const Tensor& xs, const std::vector<int64_t>& sizes) const;

  const MoeConfig config;
  std::shared_ptr<Linear> router;  // (E, dim), no bias; computed in f32 under autocast
  Tensor w1, w3, w2;  // (E, hidden, dim); w3 (SwiGLU's up) or undefined; (E, dim, hidden)
  std::shared_ptr<Module> shared;  // nn::SwiGLU or nn::Mlp of shared_experts x hidden; or null
  // Added to the router's scores for choosing the experts only (never to the gates).
  std::vector<float> selection_bias;
  // The factor the trainer applies to this forward's loss (1 / micro-steps): the balancing
  // losses' gradients are scaled alike, so they weigh the same however a step is split.
  double loss_scale = 1.0;

  const MoeStats& stats() const { return stats_; }
  void reset_stats();
  // Aux-loss-free balancing, after an update: bias_e += bias_rate * sign(mean - load_e), from
  // the assignments per expert of every rank that trained this step (summed by the caller).
  void update_selection_bias(const std::vector<double>& load);

 private:
  mutable MoeStats stats_;
};

// Every MoE layer of a model, by path ("blocks.1.mlp").
std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model);
// The selection biases of `from`'s layers into `to`'s of the same paths (an EMA copy routes as
// the trained model does).
void copy_selection_biases(Module& from, Module& to);

}  // namespace loom::nn
