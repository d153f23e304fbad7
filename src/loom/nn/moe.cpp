#include "loom/nn/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/autograd/node.h"
#include "loom/ops/ops.h"

namespace loom::nn {

namespace {

// An expert matrix (out, in)'s initialiser: xavier's bound from the matrix's own fans (the
// (E, out, in) stack is not a 2-D shape the generic xavier reads), anything else as given.
Init expert_init(Init init, int64_t out, int64_t in) {
  if (init.kind != Init::XavierUniform) return init;
  const float bound = float(std::sqrt(6.0 / double(out + in)));
  return Init::uniform(-bound, bound);
}

// Which experts each token goes to, and the tokens sorted by expert.
struct Routing {
  std::vector<int64_t> expert;  // (N k): token n's experts at n k .. n k + k - 1, best first
  std::vector<int64_t> order;   // (N k): the slots n k + j sorted by expert (by token within)
  std::vector<int64_t> token;   // (N k): the token of each sorted slot (order / k)
  std::vector<int64_t> sizes;   // (E): the slots of each expert
};

// Top k of scores + bias per row; ties go to the lower index, a NaN score is never chosen
// before a number (the step guard then skips the step).
Routing route(const std::vector<float>& scores, const std::vector<float>& bias, int64_t N,
              int64_t E, int64_t k) {
  Routing r;
  r.expert.resize(size_t(N * k));
  r.sizes.assign(size_t(E), 0);
  std::vector<int64_t> idx(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const float* s = scores.data() + n * E;
    auto key = [&](int64_t e) {
      const float v = s[e] + bias[size_t(e)];
      return std::isnan(v) ? -INFINITY : v;
    };
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
      const float ka = key(a), kb = key(b);
      return ka > kb || (ka == kb && a < b);
    });
    for (int64_t j = 0; j < k; ++j) {
      r.expert[size_t(n * k + j)] = idx[size_t(j)];
      ++r.sizes[size_t(idx[size_t(j)])];
    }
  }
  std::vector<int64_t> next(size_t(E), 0);  // counting sort of the slots by expert (stable)
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + r.sizes[size_t(e - 1)];
  r.order.resize(size_t(N * k));
  r.token.resize(size_t(N * k));
  for (int64_t slot = 0; slot < N * k; ++slot) {
    const int64_t pos = next[size_t(r.expert[size_t(slot)])]++;
    r.order[size_t(pos)] = slot;
    r.token[size_t(pos)] = slot / k;
  }
  return r;
}

// y unchanged forward; backward also hands `loss` the gradient `scale`, as if scale * loss had
// been added to the objective. The balancing losses enter training this way from inside the
// layer: with activation checkpointing (the recompute records it again) and pipeline stages
// alike, without the recipe's loss having to collect them.
struct AttachLossBackward : Node {
  double scale = 1;
  Device device;  // the loss's
  const char* name() const override { return "AttachLossBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {g[0], full({}, scale, DType::F32, device)};
  }
};

Tensor attach_loss(const Tensor& y, const Tensor& loss, double scale) {
  Tensor out = y.detach();
  auto node = std::make_shared<AttachLossBackward>();
  node->scale = scale;
  node->device = loss.device();
  record(node, {y, loss}, {out});
  return out;
}

}  // namespace

void MoeConfig::validate(int64_t depth) const {
  LOOM_CHECK(experts >= 0) << "moe.experts must be non-negative, got " << experts;
  if (!enabled()) return;
  LOOM_CHECK(top_k >= 1 && top_k <= experts)
      << "moe.top_k " << top_k << " must be between 1 and moe.experts (" << experts << ")";
  LOOM_CHECK(hidden > 0) << "moe.hidden must be positive, got " << hidden;
  LOOM_CHECK(shared_experts >= 0) << "moe.shared_experts must be non-negative";
  LOOM_CHECK(aux_loss >= 0 && z_loss >= 0 && bias_rate >= 0)
      << "moe.aux_loss, moe.z_loss and moe.bias_rate must be non-negative";
  LOOM_CHECK(every >= 1) << "moe.every must be at least 1, got " << every;
  LOOM_CHECK(depth <= 0 || every <= depth) << "moe.every " << every << " is more than model.depth "
                                           << depth << ": no block would be a mixture of experts";
}

MoE::MoE(int64_t dim, const MoeConfig& c, Init init) : config(c) {
  config.validate();
  LOOM_CHECK(config.enabled()) << "nn::MoE needs moe.experts > 0";
  const int64_t E = config.experts, H = config.hidden;
  router = register_module("router", std::make_shared<Linear>(dim, E, false, init));
  w1 = register_parameter("w1", {E, H, dim}, expert_init(init, H, dim));
  if (config.swiglu) w3 = register_parameter("w3", {E, H, dim}, expert_init(init, H, dim));
  w2 = register_parameter("w2", {E, dim, H}, expert_init(init, dim, H));
  if (config.shared_experts > 0) {
    const int64_t sh = config.shared_experts * H;
    if (config.swiglu)
      shared = register_module("shared", std::make_shared<SwiGLU>(dim, sh, init));
    else
      shared = register_module("shared", std::make_shared<Mlp>(dim, sh, init));
  }
  selection_bias.assign(size_t(E), 0.0f);
  reset_stats();
}

void MoE::reset_stats() {
  stats_ = MoeStats{};
  stats_.load.assign(size_t(config.experts), 0);
}

void MoE::update_selection_bias(const std::vector<double>& load) {
  LOOM_CHECK(int64_t(load.size()) == config.experts)
      << "moe: " << load.size() << " loads for " << config.experts << " experts";
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / double(load.size());
  for (size_t e = 0; e < load.size(); ++e) {
    if (load[e] < mean) selection_bias[e] += float(config.bias_rate);
    if (load[e] > mean) selection_bias[e] -= float(config.bias_rate);
  }
}

Tensor MoE::local_experts(const Tensor& xs, const std::vector<int64_t>& sizes) const {
  const Tensor pre = grouped_linear(xs, w1, sizes);  // (rows, H)
  const Tensor h = config.swiglu ? swiglu(pre, grouped_linear(xs, w3, sizes)) : gelu(pre);
  return grouped_linear(h, w2, sizes);  // (rows, C)
}

Tensor MoE::forward(const Tensor& x) const {
  const int64_t C = x.size(-1), E = config.experts, k = config.top_k;
  const Tensor x2 = reshape(x, {-1, C});  // (N, C)
  const int64_t N = x2.size(0);
  Tensor logits;  // (N, E)
  {
    AutocastGuard full_precision(DType::F32);  // the routing decision in f32, as is usual
    logits = router->forward(x2);
  }
  const bool softmax_gating = config.gating == MoeGating::Softmax;
  const Tensor scores = softmax_gating ? softmax(logits) : sigmoid(logits);  // (N, E)
  const std::vector<float> host_scores = to_vector(scores);
  const Routing r = route(host_scores, selection_bias, N, E, k);

  Tensor gates = gather(scores, 1, from_vector(r.expert, {N, k}));  // (N, k)
  if (config.renormalize || !softmax_gating) gates = div(gates, sum(gates, {1}, true));
  const Tensor token = from_vector(r.token, {N * k});
  const Tensor xs = index_select(x2, 0, token);  // (N k, C): grouped by expert
  const Tensor gs = reshape(index_select(reshape(gates, {N * k}), 0, from_vector(r.order, {N * k})),
                            {N * k, 1});  // (N k, 1): each sorted slot's gate
  const Tensor ys = mul(experts ? experts(xs, r.sizes) : local_experts(xs, r.sizes), gs);
  Tensor y = index_add(zeros({N, C}, ys.dtype(), x.device()), 0, token, ys);  // (N, C)
  if (shared)
    y = add(y, config.swiglu ? static_cast<const SwiGLU&>(*shared).forward(x2)
                             : static_cast<const Mlp&>(*shared).forward(x2));

  if (any_requires_grad({router->weight})) {  // a training forward: count it, balance it
    // The router's distribution over the experts: the softmax, or the normalised sigmoids.
    const Tensor p = softmax_gating ? scores : div(scores, sum(scores, {1}, true));  // (N, E)
    const std::vector<float> host_p = softmax_gating ? host_scores : to_vector(p);
    const std::vector<float> host_logits = to_vector(logits);
    // Switch: E * sum_e f_e P_e, f_e the fraction of the N k assignments to e, P_e the mean
    // router probability of e (1 when balanced); z: the mean squared log-sum-exp of the logits.
    std::vector<float> f(static_cast<size_t>(E));
    std::vector<double> P(size_t(E), 0.0);
    double z = 0, entropy = 0;
    std::vector<float> row_max(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
      const float* l = host_logits.data() + n * E;
      const float m = *std::max_element(l, l + E);
      double s = 0;
      for (int64_t e = 0; e < E; ++e) s += std::exp(double(l[e]) - m);
      const double lse = double(m) + std::log(s);
      z += lse * lse;
      row_max[size_t(n)] = m;
      for (int64_t e = 0; e < E; ++e) {
        const double pe = host_p[size_t(n * E + e)];
        P[size_t(e)] += pe / double(N);
        if (pe > 0) entropy -= pe * std::log(pe) / double(N);
      }
    }
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) {
      f[size_t(e)] = float(double(r.sizes[size_t(e)]) / double(N * k));
      aux += double(E) * f[size_t(e)] * P[size_t(e)];
      stats_.load[size_t(e)] += r.sizes[size_t(e)];
    }
    stats_.tokens += N;
    stats_.aux_loss += aux;
    stats_.z_loss += z / double(N);
    stats_.entropy += entropy;
    ++stats_.forwards;

    Tensor balancing;  // the weighted losses, differentiable through the router
    if (config.aux_loss > 0)
      balancing = mul_scalar(sum(mul(mean(p, {0}), from_vector(f, {E}, DType::F32, x.device()))),
                             double(E) * config.aux_loss);
    if (config.z_loss > 0) {
      // A constant shift: exact in the gradient.
      const Tensor m = from_vector(row_max, {N, 1}, DType::F32, x.device());
      const Tensor lse = add(log(sum(exp(sub(logits, m)), {1})), reshape(m, {N}));  // (N)
      const Tensor zl = mul_scalar(mean(mul(lse, lse)), config.z_loss);
      balancing = balancing.defined() ? add(balancing, zl) : zl;
    }
    if (balancing.defined()) y = attach_loss(y, balancing, loss_scale);
  }
  Shape out_shape = x.shape();
  return reshape(y, out_shape);  // (..., C)
}

std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model) {
  std::vector<std::pair<std::string, MoE*>> out;
  model.for_each_submodule([&](const std::string& path, Module& m) {
    if (auto* moe = dynamic_cast<MoE*>(&m)) out.emplace_back(path, moe);
  });
  return out;
}

void copy_selection_biases(Module& from, Module& to) {
  auto targets = moe_layers(to);
  for (const auto& [path, moe] : moe_layers(from)) {
    auto it = std::find_if(targets.begin(), targets.end(),
                           [&](const auto& t) { return t.first == path; });
    LOOM_CHECK(it != targets.end()) << "copy_selection_biases: no mixture at " << path;
    it->second->selection_bias = moe->selection_bias;
  }
}

}  // namespace loom::nn
