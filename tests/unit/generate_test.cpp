// Generation with the KV cache (models/gpt/generate.h):
//  - the cached forward over a sequence in pieces (a prefill, single tokens, a chunk) gives the
//    whole forward's logits at every position, for GPT-2 style and Llama style with grouped-query
//    attention (with a Mamba-2 block; with a sliding window; latent attention, decoded by the
//    absorbed path), on a batch of 2;
//  - generating with the cache gives the uncached path's tokens, greedy and sampled with top-k
//    and top-p; prompts of different lengths batched give each prompt's greedy continuation
//    alone; past the context the cache is rebuilt and generation goes on;
//  - the top-k and top-p cuts keep exactly the tokens they should, drawn in proportion.
// References: Gpt::forward over the whole sequence; probabilities written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "loom/models/gpt/generate.h"
#include "loom/ops/ops.h"

namespace loom::models {
namespace {

GptConfig tiny(bool llama) {
  GptConfig g;
  g.style = llama ? GptStyle::Llama : GptStyle::Gpt2;
  g.vocab_size = 13, g.context = 12, g.width = 16, g.depth = 2, g.heads = 4;
  g.kv_heads = llama ? 2 : 0;
  g.tie_embeddings = !llama;
  return g;
}

std::vector<int64_t> tokens_of(int64_t B, int64_t T) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back((i * 7 + 3) % 13);
  return ids;
}

TEST(KvCache, CachedPiecesGiveTheWholeForwardsLogits) {
  for (int variant : {0, 1, 2, 3}) {
    const bool llama = variant > 0;
    GptConfig g = tiny(llama);
    // Llama's second block a Mamba-2 layer: its cache is its convolution inputs and state.
    if (variant == 1) g.mixers = "AM", g.ssm.state = 4, g.ssm.head_dim = 8, g.ssm.chunk = 3;
    // A sliding window of 3: a step reads only the cache's last rows.
    if (variant == 2) g.window = 3;
    // Latent attention: the cache holds each token's latent and shared RoPE key, attended to by
    // the queries absorbed into the latent space (another computation than forward's).
    if (variant == 3) g.kv_heads = 0, g.mla_kv_rank = 6, g.mla_q_rank = 5, g.mla_rope_dim = 2;
    Gpt model(g);
    model.init_parameters(2);
    const int64_t B = 2, T = 10, V = 13;
    const std::vector<int64_t> ids = tokens_of(B, T);
    NoGradGuard no_grad;
    const std::vector<float> whole = to_vector(model.forward(from_vector(ids, {B, T})));
    std::vector<nn::KvCache> cache;
    int64_t at = 0;
    for (int64_t len : {4, 1, 1, 4}) {  // prefill, two single tokens, a chunk
      std::vector<int64_t> piece;
      for (int64_t b = 0; b < B; ++b)
        piece.insert(piece.end(), ids.begin() + b * T + at, ids.begin() + b * T + at + len);
      const std::vector<float> got =
          to_vector(model.forward_cached(from_vector(piece, {B, len}), cache));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < len; ++t)
          for (int64_t v = 0; v < V; ++v)
            ASSERT_NEAR(got[size_t((b * len + t) * V + v)], whole[size_t((b * T + at + t) * V + v)],
                        2e-5)
                << "variant " << variant << ", row " << b << ", position " << at + t;
      at += len;
    }
    EXPECT_EQ(cache[0].length, T);
    expect_error(
        [&] {
          model.forward_cached(from_vector(tokens_of(B, 3), {B, 3}), cache);
        },
        {"beyond the context 12"});
  }
}

// What a cache holds a position, against the layouts written out: f32 keys and values of the
// key/value heads in every attention block; MLA's latent and shared RoPE key, whatever the heads;
// nothing a position for a Mamba-2 block.
TEST(KvCache, BytesAPositionAreTheLayouts) {
  GptConfig g = tiny(true);  // depth 2, 4 heads of 4 over 2 key/value heads
  EXPECT_EQ(cache_bytes_per_position(Gpt(g)), 2 * 2 * 2 * 4 * 4);
  g.kv_heads = 0;
  EXPECT_EQ(cache_bytes_per_position(Gpt(g)), 2 * 2 * 4 * 4 * 4);
  g.mla_kv_rank = 6, g.mla_rope_dim = 2;
  EXPECT_EQ(cache_bytes_per_position(Gpt(g)), 2 * (6 + 2) * 4);
  g = tiny(true);
  g.mixers = "AM", g.ssm.state = 4, g.ssm.head_dim = 8, g.ssm.chunk = 3;
  EXPECT_EQ(cache_bytes_per_position(Gpt(g)), 2 * 2 * 4 * 4);
}

TEST(Generate, WithTheCacheGivesTheUncachedTokens) {
  for (bool llama : {false, true}) {
    Gpt model(tiny(llama));
    model.init_parameters(3);
    for (const SampleOptions& base : {SampleOptions{8, 0.0}, SampleOptions{8, 1.0, 5, 0.9, 7}}) {
      SampleOptions cached = base, uncached = base;
      uncached.kv_cache = false;
      const std::vector<int32_t> prompt = {1, 5, 2};
      EXPECT_EQ(generate(model, prompt, cached), generate(model, prompt, uncached))
          << (llama ? "llama" : "gpt2") << ", temperature " << base.temperature;
    }
  }
}

TEST(Generate, PromptsOfDifferentLengthsBatchedAsEachAlone) {
  Gpt model(tiny(true));
  model.init_parameters(4);
  const SampleOptions greedy{6, 0.0};
  const std::vector<std::vector<int32_t>> prompts = {{3}, {4, 9, 1, 2}, {7, 7}};
  const auto together = generate(model, prompts, greedy);
  ASSERT_EQ(together.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].size(), prompts[i].size() + 6);
    EXPECT_EQ(together[i], generate(model, prompts[i], greedy)) << "prompt " << i;
  }
  // Sampled, the first row draws as it would alone.
  const SampleOptions drawn{6, 1.0, 0, 1.0, 11};
  EXPECT_EQ(generate(model, prompts, drawn)[0], generate(model, prompts[0], drawn));
}

TEST(Generate, PastTheContextTheCacheIsRebuilt) {
  Gpt model(tiny(false));
  model.init_parameters(5);
  const std::vector<int32_t> out = generate(model, {1, 2, 3}, SampleOptions{20, 0.8});
  EXPECT_EQ(out.size(), 23u);  // 12 positions only: rebuilt from the last 6 tokens, twice
  for (int32_t t : out) EXPECT_TRUE(t >= 0 && t < 13);
}

TEST(PickToken, TopKAndTopPKeepTheMostLikelyAndDrawInProportion) {
  // Probabilities 0.1, 0.2, 0.3, 0.4 (logits log p, temperature 1).
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f),
                                     std::log(0.4f)};
  auto pick = [&](int64_t k, double p, float u) {
    SampleOptions o{1, 1.0, k, p};
    return pick_token(logits.data(), 4, o, u);
  };
  // All four, by the inverse CDF in token order: [0, .1) -> 0, [.1, .3) -> 1, [.3, .6) -> 2.
  EXPECT_EQ(pick(0, 1.0, 0.05f), 0);
  EXPECT_EQ(pick(0, 1.0, 0.29f), 1);
  EXPECT_EQ(pick(0, 1.0, 0.59f), 2);
  EXPECT_EQ(pick(0, 1.0, 0.61f), 3);
  // Top 2 (tokens 2 and 3, renormalised to 3/7 and 4/7), and top-p 0.5 keeps the same two.
  for (auto [k, p] : {std::pair<int64_t, double>{2, 1.0}, {0, 0.5}}) {
    EXPECT_EQ(pick(k, p, 0.0f), 2);
    EXPECT_EQ(pick(k, p, 0.42f), 2);  // 3/7 = 0.4286
    EXPECT_EQ(pick(k, p, 0.44f), 3);
    EXPECT_EQ(pick(k, p, 0.99f), 3);
  }
  EXPECT_EQ(pick(0, 0.39, 0.0f), 3);  // top-p below the largest: the largest alone
  EXPECT_EQ(pick(1, 1.0, 0.0f), 3);
  SampleOptions greedy{1, 0.0};
  EXPECT_EQ(pick_token(logits.data(), 4, greedy, 0.0f), 3);
}

}  // namespace
}  // namespace loom::models
