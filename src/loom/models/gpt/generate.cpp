#include "loom/models/gpt/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/core/rng.h"
#include "loom/ops/ops.h"

namespace loom::models {

int64_t cache_bytes_per_position(const Gpt& model) {
  std::vector<nn::KvCache> cache;
  model.forward_cached(zeros({1, 1}, DType::I64), cache);
  int64_t bytes = 0;
  for (const nn::KvCache& c : cache)
    for (const Tensor& t : {c.k, c.v})
      if (t.defined()) bytes += int64_t(t.nbytes());
  return bytes / model.config.context;
}

int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, float u) {
  const int64_t best = std::max_element(logits, logits + V) - logits;
  if (o.temperature <= 0) return int32_t(best);
  // Softmax of logits / temperature (unnormalised), then the cuts.
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v)
    p[size_t(v)] = std::exp(double(logits[v] - logits[best]) / o.temperature);
  if ((o.top_k > 0 && o.top_k < V) || o.top_p < 1) {
    std::vector<int64_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    // Most likely first; equals by token id, so the cut is the same on every machine.
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    const int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
    double total = 0;
    for (int64_t i = 0; i < k; ++i) total += p[size_t(order[size_t(i)])];
    double kept = 0;
    int64_t keep = 0;
    while (keep < k && (keep == 0 || kept < o.top_p * total))
      kept += p[size_t(order[size_t(keep++)])];
    for (int64_t i = keep; i < V; ++i) p[size_t(order[size_t(i)])] = 0;
  }
  double total = 0;
  for (double x : p) total += x;
  double left = double(u) * total;
  int32_t last = int32_t(best);
  for (int64_t v = 0; v < V; ++v) {
    if (p[size_t(v)] == 0) continue;
    last = int32_t(v);
    left -= p[size_t(v)];
    if (left < 0) return last;
  }
  return last;  // rounding left a sliver: the last kept token
}

namespace {

// The logits (B, V) of each row's last token, over the sequences' last model.context tokens.
std::vector<float> window_logits(const Gpt& model, const std::vector<std::vector<int32_t>>& seqs) {
  const int64_t B = int64_t(seqs.size()), n = int64_t(seqs[0].size());
  const int64_t W = std::min(n, model.config.context), V = model.config.vocab_size;
  std::vector<int64_t> ids;
  for (const auto& s : seqs) ids.insert(ids.end(), s.end() - W, s.end());
  const std::vector<float> all =
      to_vector(model.forward(from_vector(ids, {B, W}, DType::I64, model.device())));  // (B, W, V)
  std::vector<float> last;
  for (int64_t b = 0; b < B; ++b) {
    const float* row = all.data() + (b * W + W - 1) * V;
    last.insert(last.end(), row, row + V);
  }
  return last;
}

// Feeds the sequences' tokens [from, to) through the cache; the logits (B, V) of the last.
std::vector<float> cached_logits(const Gpt& model, const std::vector<std::vector<int32_t>>& seqs,
                                 int64_t from, int64_t to, std::vector<nn::KvCache>& cache) {
  const int64_t B = int64_t(seqs.size()), T = to - from, V = model.config.vocab_size;
  std::vector<int64_t> ids;
  for (const auto& s : seqs) ids.insert(ids.end(), s.begin() + from, s.begin() + to);
  const std::vector<float> all =
      to_vector(model.forward_cached(from_vector(ids, {B, T}, DType::I64, model.device()), cache));
  std::vector<float> last;
  for (int64_t b = 0; b < B; ++b) {
    const float* row = all.data() + (b * T + T - 1) * V;
    last.insert(last.end(), row, row + V);
  }
  return last;
}

}  // namespace

std::vector<std::vector<int32_t>> generate(const Gpt& model,
                                           std::vector<std::vector<int32_t>> prompts,
                                           const SampleOptions& o) {
  NoGradGuard no_grad;
  LOOM_CHECK(o.tokens >= 0 && o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1)
      << "sample: tokens, temperature and top_k must be non-negative and top_p in (0, 1]";
  LOOM_CHECK(!prompts.empty()) << "sample: no prompt";
  size_t shortest = prompts[0].size(), longest = 0;
  for (const auto& p : prompts) {
    LOOM_CHECK(!p.empty()) << "sample: nothing to continue (a prompt without tokens)";
    shortest = std::min(shortest, p.size());
    longest = std::max(longest, p.size());
  }
  const int64_t B = int64_t(prompts.size()), V = model.config.vocab_size, C = model.config.context;
  const uint64_t key = RngKey{o.seed, "lm.sample", ""}.hash();
  // Every row advances one position a step, from the shortest prompt's end until the longest
  // prompt has o.tokens more; a row's own prompt tokens come before any drawn one.
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    seqs[size_t(b)].assign(prompts[size_t(b)].begin(), prompts[size_t(b)].begin() + shortest);
  const int64_t steps = int64_t(longest - shortest) + o.tokens;
  std::vector<nn::KvCache> cache;
  int64_t cached = 0;  // tokens of seqs the cache holds, from position `start`
  int64_t start = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t n = int64_t(seqs[0].size());
    std::vector<float> logits;
    if (!o.kv_cache) {
      logits = window_logits(model, seqs);
    } else {
      if (n - start > C) {  // full: rebuild from the last context / 2 tokens
        cache.clear();
        start = n - std::max<int64_t>(C / 2, 1);
        cached = 0;
      }
      logits = cached_logits(
          model,
          [&] {
            std::vector<std::vector<int32_t>> tail;
            for (const auto& s : seqs) tail.emplace_back(s.begin() + start, s.end());
            return tail;
          }(),
          cached, n - start, cache);
      cached = n - start;
    }
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int32_t>& s = seqs[size_t(b)];
      const std::vector<int32_t>& p = prompts[size_t(b)];
      const size_t at = s.size();
      s.push_back(at < p.size()
                      ? p[at]
                      : pick_token(logits.data() + b * V, V, o,
                                   uniform_at(key, uint64_t(b) << 32 | uint64_t(at - p.size()))));
    }
  }
  // Each row: its prompt and o.tokens more (rows of shorter prompts drew extra: dropped).
  for (int64_t b = 0; b < B; ++b)
    seqs[size_t(b)].resize(prompts[size_t(b)].size() + size_t(o.tokens));
  return seqs;
}

std::vector<int32_t> generate(const Gpt& model, std::vector<int32_t> ids, const SampleOptions& o) {
  return generate(model, std::vector<std::vector<int32_t>>{std::move(ids)}, o)[0];
}

}  // namespace loom::models
