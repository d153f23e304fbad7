// A Mamba-2 mixer (Dao & Gu 2024), the sequence-mixing half of a state-space block, as plain
// single-device code. Per token, one projection gives the gate z, the SSM input x, the shared
// B and C and one step size per head; x, B and C pass a short causal depthwise convolution and
// SiLU; the SSD scan (nn/ssd.h) mixes the sequence; D x skips it; the result is gated by
// SiLU(z), RMS-normalised within each group of heads and projected back.
#pragma once
#include <memory>

#include "loom/nn/layers.h"
#include "loom/nn/ssd.h"

namespace loom::nn {

struct Mamba2Config {
  int64_t dim = 0;        // the model's width C
  int64_t state = 64;     // N, the state size per head and group
  int64_t head_dim = 64;  // P
  int64_t expand = 2;     // inner width = expand * dim, in inner / P heads
  int64_t groups = 1;     // G: heads share B and C within a group
  int64_t conv = 4;       // the causal convolution's width
  int64_t chunk = 64;     // the scan's chunk length (the kernel's: its checkpoint interval)
  // The scan: the chunked SSD form from composed ops (GEMMs within chunks; the faster on the
  // CPU, measured in docs/models.md), or the backend's step-by-step kernel (ops/ssm_scan.h),
  // which keeps only a state every `chunk` steps for the backward.
  bool scan_kernel = false;
  float norm_eps = 1e-5f;
  Init init = Init::normal(0.02f);  // in_proj and out_proj
  int64_t inner() const { return expand * dim; }
  int64_t heads() const { return inner() / head_dim; }
  int64_t conv_channels() const { return inner() + 2 * groups * state; }
  void validate() const;  // one clear error naming the field
};

class Mamba2 : public Module {
 public:
  explicit Mamba2(const Mamba2Config& config);
  Tensor forward(const Tensor& u) const;  // (B, T, dim) -> (B, T, dim)
  // Incremental decoding without a graph: u (B, T, dim) the rows after the cache's `length`;
  // they continue its convolution inputs and state, which then hold theirs (a new cache: both
  // undefined, zeros). Over a sequence in pieces it equals forward over the whole.
  Tensor forward_cached(const Tensor& u, KvCache& cache) const;

  const Mamba2Config config;
  // The heads and groups this module computes: tensor parallelism lowers them to this rank's
  // share (whole groups with their heads) and shards the parameters below to match.
  int64_t heads, groups;
  // Shapes for the whole layer; under tensor parallelism each holds its rank's heads and groups.
  std::shared_ptr<Linear> in_proj;   // dim -> inner (z) + conv_channels (x, B, C) + heads (dt)
  Tensor conv_weight, conv_bias;     // (conv_channels, conv), (conv_channels)
  Tensor dt_bias, A_log, D;          // (heads) each; A = -exp(A_log)
  std::shared_ptr<RMSNorm> norm;     // (inner), after the gate, over each group's channels
  std::shared_ptr<Linear> out_proj;  // inner -> dim

 private:
  // The mixer from the projection's parts: z (B, T, inner), xbc_padded (B, conv - 1 + T,
  // conv_channels) the convolution's input with the conv - 1 rows before these T, dt (B, T,
  // heads) -> y the output (B, T, dim), final_state the scan's.
  SsdResult mix(const Tensor& z, const Tensor& xbc_padded, const Tensor& dt,
                const Tensor& initial_state) const;
  // This module's share of conv_channels and of its output (z, x, B, C, dt) rows of in_proj.
  int64_t inner() const { return heads * config.head_dim; }
  int64_t channels() const { return inner() + 2 * groups * config.state; }
};

}  // namespace loom::nn
