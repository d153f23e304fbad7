// Tensor-parallel linear layers (Megatron-LM style) over `group` (P ranks):
//   column-parallel: the weight's output rows are split, W_r (N/P, K); the input is the whole
//     x (the same on every rank), the output this rank's N/P features.
//   row-parallel:    the weight's input columns are split, W_r (N, K/P); the input is this
//     rank's K/P features, the output the sum over ranks (plus the bias, held whole).
// A column-parallel layer followed by a row-parallel one (an MLP, attention's QKV and output
// projections) communicates once forward and once backward.
//
// With sequence parallelism the activations between such pairs are split along the sequence
// (dim seq_dim) instead of replicated: the column layer all-gathers its input along it and the
// row layer reduce-scatters its output along it -- the same bytes as the all-reduce, and the
// norms and residual adds in between work on 1/P of the tokens.
//
// apply_tensor_parallel applies this to a model from outside, following the model's plan
// (nn/parallel_plan.h): it cuts the named parameters down to this rank's part and wraps the
// named layers' forward with the collectives.
#pragma once
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/nn/module.h"
#include "loom/nn/parallel_plan.h"
#include "loom/parallel/functional.h"

namespace loom::parallel {

// seq_dim < 0: no sequence parallelism (x replicated); else x is split along seq_dim.
Tensor column_parallel_linear(const Tensor& x, const Tensor& weight_shard, const Tensor& bias_shard,
                              const GroupPtr& group, int64_t seq_dim = -1);
Tensor row_parallel_linear(const Tensor& x_shard, const Tensor& weight_shard, const Tensor& bias,
                           const GroupPtr& group, int64_t seq_dim = -1);

// How each tensor-parallel rank's part of a parameter sits in the whole parameter: along
// dimension `dim`, the concatenation of the whole's index ranges blocks[rank] (start, length).
struct TensorShard {
  Shape whole_shape;
  int64_t dim = 0;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> blocks;  // per tp rank

  Shape shape(int64_t rank) const;
  // rank's part, a contiguous copy (of a whole without memory: a part without memory)
  Tensor take(const Tensor& whole, int64_t rank) const;
  // Where the part's row-major elements lie in the whole.
  using Run = nn::ElementRun;
  std::vector<Run> runs(int64_t rank) const;
};

// What apply_tensor_parallel did: the parameters it split (by full name), and the whole
// (unsplit) parameters whose gradient each rank holds only its share of -- those used on
// sequence shards, or every head alike where the heads split (QK-norm) -- which must be summed
// over the tp ranks before the optimizer step.
struct TensorParallelLayout {
  std::map<std::string, TensorShard> sharded;
  std::set<std::string> partial_gradients;
};

// Collective-free, before any forward: every rank holds the whole model (same values); each
// keeps its part. Errors (naming the module) when heads or features do not divide by the
// group size. sequence_parallel: the residual stream between the plan's blocks is split
// along plan.sequence_dim.
TensorParallelLayout apply_tensor_parallel(nn::Module& model, const nn::ParallelPlan& plan,
                                           const GroupPtr& group, bool sequence_parallel);

}  // namespace loom::parallel
