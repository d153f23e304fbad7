#include "loom/models/gpt/generate.h"

#include <algorithm>
#include <cmath>

#include "loom/core/rng.h"
#include "loom/ops/ops.h"

namespace loom::models {

std::vector<int32_t> generate(const Gpt& model, std::vector<int32_t> ids, int64_t tokens,
                              double temperature, uint64_t seed) {
  NoGradGuard no_grad;
  LOOM_CHECK(tokens >= 0 && temperature >= 0)
      << "sample: tokens and temperature must be non-negative";
  LOOM_CHECK(!ids.empty()) << "sample: nothing to continue (no prompt tokens)";
  const int64_t V = model.config.vocab_size, C = model.config.context;
  const uint64_t key = RngKey{seed, "lm.sample", ""}.hash();
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t W = std::min<int64_t>(int64_t(ids.size()), C);
    const std::vector<int64_t> window(ids.end() - W, ids.end());
    const std::vector<float> logits = to_vector(
        model.forward(from_vector(window, {1, W}, DType::I64, model.device())));  // (1, W, V)
    const float* last = logits.data() + (W - 1) * V;                              // (V)
    int32_t next = int32_t(std::max_element(last, last + V) - last);
    if (temperature > 0) {
      // Softmax of logits / temperature, then the inverse CDF at a Philox uniform.
      std::vector<double> p(static_cast<size_t>(V));
      double total = 0;
      for (int64_t v = 0; v < V; ++v) {
        p[size_t(v)] = std::exp(double(last[v] - last[next]) / temperature);
        total += p[size_t(v)];
      }
      double u = double(uniform_at(key, uint64_t(i))) * total;
      for (int64_t v = 0; v < V; ++v) {
        u -= p[size_t(v)];
        if (u < 0 || v == V - 1) {
          next = int32_t(v);
          break;
        }
      }
    }
    ids.push_back(next);
  }
  return ids;
}

}  // namespace loom::models
