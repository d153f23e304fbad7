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
#pragma once
#include "loom/parallel/functional.h"

namespace loom::parallel {

// seq_dim < 0: no sequence parallelism (x replicated); else x is split along seq_dim.
Tensor column_parallel_linear(const Tensor& x, const Tensor& weight_shard, const Tensor& bias_shard,
                              const GroupPtr& group, int64_t seq_dim = -1);
Tensor row_parallel_linear(const Tensor& x_shard, const Tensor& weight_shard, const Tensor& bias,
                           const GroupPtr& group, int64_t seq_dim = -1);

}  // namespace loom::parallel
