#include "loom/nn/mamba2.h"

#include <cmath>

#include "loom/ops/ops.h"

namespace loom::nn {

void Mamba2Config::validate() const {
  LOOM_CHECK(dim > 0 && state > 0 && head_dim > 0 && expand > 0 && groups > 0 && conv > 1 &&
             chunk > 0)
      << "mamba2: dim " << dim << ", ssm_state " << state << ", ssm_head_dim " << head_dim
      << ", ssm_expand " << expand << ", ssm_groups " << groups << ", ssm_conv " << conv
      << " and ssm_chunk " << chunk << " must all be positive (ssm_conv at least 2)";
  LOOM_CHECK(inner() % head_dim == 0) << "mamba2: the inner width ssm_expand x width = " << inner()
                                      << " is not divisible by ssm_head_dim " << head_dim;
  LOOM_CHECK(heads() % groups == 0)
      << "mamba2: its " << heads() << " heads (inner width " << inner() << " / ssm_head_dim "
      << head_dim << ") are not divisible by ssm_groups " << groups;
}

Mamba2::Mamba2(const Mamba2Config& c) : config(c), heads(c.heads()), groups(c.groups) {
  config.validate();
  const int64_t H = c.heads(), K = c.conv, channels = c.conv_channels();
  in_proj = register_module(
      "in_proj", std::make_shared<Linear>(c.dim, c.inner() + channels + H, false, c.init));
  // Mamba-2's initialisation: the convolution as PyTorch's default for a depthwise Conv1d
  // (fan-in conv), step sizes softplus(dt_bias) about log-uniform in [0.001, 0.1] (dt_bias
  // uniform in [ln 0.001, ln 0.1]: softplus(b) is within 5% of exp(b) there), decay rates
  // A = -exp(A_log) log-uniform in [1, 16], D one.
  const float bound = 1.0f / std::sqrt(float(K));
  conv_weight = register_parameter("conv_weight", {channels, K}, Init::uniform(-bound, bound));
  conv_bias = register_parameter("conv_bias", {channels}, Init::uniform(-bound, bound), false);
  dt_bias =
      register_parameter("dt_bias", {H}, Init::uniform(std::log(0.001f), std::log(0.1f)), false);
  A_log = register_parameter("A_log", {H}, Init::uniform(0.0f, std::log(16.0f)), false);
  D = register_parameter("D", {H}, Init::ones(), false);
  norm = register_module("norm", std::make_shared<RMSNorm>(c.inner(), c.norm_eps));
  out_proj = register_module("out_proj", std::make_shared<Linear>(c.inner(), c.dim, false, c.init));
}

SsdResult Mamba2::mix(const Tensor& z, const Tensor& xbc_padded, const Tensor& dt,
                      const Tensor& initial_state) const {
  const Mamba2Config& c = config;
  const int64_t B = z.size(0), T = z.size(1), GN = groups * c.state;
  // The causal depthwise convolution: row t sums taps k of the rows t + k of the padded input
  // (the last tap is row t itself).
  Tensor acc = conv_bias;
  for (int64_t k = 0; k < c.conv; ++k)
    acc = add(acc, mul(narrow(xbc_padded, 1, k, T), reshape(narrow(conv_weight, 1, k, 1), {-1})));
  const std::vector<Tensor> xbc = split(silu(acc), {inner(), GN, GN}, 2);
  const Tensor x = reshape(xbc[0], {B, T, heads, c.head_dim});
  const Tensor step = softplus(add(dt, dt_bias)), rate = neg(exp(A_log));
  const Tensor Bm = reshape(xbc[1], {B, T, groups, c.state}),
               Cm = reshape(xbc[2], {B, T, groups, c.state});
  SsdResult r;
  if (c.scan_kernel) {
    const SsmScanResult k = ssm_scan(x, step, rate, Bm, Cm, c.chunk, initial_state);
    r = {k.y, k.final_state};
  } else {
    r = ssd_scan(x, step, rate, Bm, Cm, c.chunk, initial_state);
  }
  const Tensor y = add(r.y, mul(x, unsqueeze(D, 1)));  // + D x: (B, T, heads, P)
  // Gated, then RMS-normalised over each group's channels (Mamba-2's grouped norm: a group's
  // heads all lie on one tensor-parallel rank, so the norm needs no communication).
  Tensor gated = mul(reshape(y, {B, T, inner()}), silu(z));  // (B, T, inner)
  if (groups > 1) {
    const Tensor g = reshape(gated, {B, T, groups, inner() / groups});
    gated =
        reshape(mul(g, rsqrt(add_scalar(mean(mul(g, g), {-1}, true), norm->eps))), {B, T, inner()});
    gated = mul(gated, norm->weight);
  } else {
    gated = norm->forward(gated);
  }
  return {out_proj->forward(gated), r.final_state};
}

Tensor Mamba2::forward(const Tensor& u) const {
  LOOM_CHECK(u.dim() == 3 && u.size(2) == config.dim)
      << "mamba2: expected (B, T, " << config.dim << "), got " << u.shape();
  const int64_t B = u.size(0);
  const std::vector<Tensor> parts = split(in_proj->forward(u), {inner(), channels(), heads}, 2);
  const Tensor before = zeros({B, config.conv - 1, channels()}, DType::F32, u.device());
  return mix(parts[0], cat({before, parts[1]}, 1), parts[2], Tensor()).y;
}

Tensor Mamba2::forward_cached(const Tensor& u, KvCache& cache) const {
  NoGradGuard no_grad;
  LOOM_CHECK(u.dim() == 3 && u.size(2) == config.dim)
      << "mamba2: expected (B, T, " << config.dim << "), got " << u.shape();
  const int64_t B = u.size(0), T = u.size(1), K = config.conv;
  if (!cache.conv.defined()) {
    cache.conv = zeros({B, K - 1, channels()}, DType::F32, u.device());
    cache.ssm = zeros({B, heads, config.head_dim, config.state}, DType::F32, u.device());
    cache.length = 0;
  }
  LOOM_CHECK(cache.conv.size(0) == B) << "mamba2: a batch of " << B << " rows does not continue "
                                      << "a cache of " << cache.conv.size(0);
  const std::vector<Tensor> parts = split(in_proj->forward(u), {inner(), channels(), heads}, 2);
  const Tensor padded = cat({cache.conv, parts[1]}, 1);  // (B, K - 1 + T, channels)
  const SsdResult r = mix(parts[0], padded, parts[2], cache.ssm);
  cache.conv = contiguous(narrow(padded, 1, T, K - 1));
  cache.ssm = r.final_state;
  cache.length += T;
  return r.y;
}

}  // namespace loom::nn
