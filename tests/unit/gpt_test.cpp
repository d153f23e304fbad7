// The GPT model in both styles (gpt2, llama): shapes, parameter count and names, config
// validation, causality, initial loss, a finite-difference gradient check of the whole model,
// and that AdamW training on a repeating sequence drives the loss down.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>

#include "loom/models/gpt/gpt.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"

namespace {

using loom::Tensor;
using loom::models::Gpt;
using loom::models::GptConfig;

GptConfig small(const std::string& style) {
  GptConfig c = style == "llama" ? GptConfig::llama() : GptConfig::gpt2();
  c.vocab_size = 32;
  c.context = 16;
  c.width = 32;
  c.depth = 2;
  c.heads = 4;
  if (c.is_llama()) c.kv_heads = 2;
  return c;
}

Tensor random_ids(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> v(size_t(B * T));
  for (auto& e : v) e = dist(gen);
  return loom::from_vector(v, {B, T});
}

// The parameter count written out from the architecture, independently of the module tree.
int64_t expected_parameters(const GptConfig& c) {
  const int64_t V = c.vocab_size, C = c.width, L = c.depth, Dh = C / c.heads;
  const int64_t Hkv = c.kv_heads == 0 ? c.heads : c.kv_heads;
  const int64_t qkv_out = (c.heads + 2 * Hkv) * Dh;
  int64_t n = V * C;  // tok_embed
  if (!c.is_llama()) {
    const int64_t F = int64_t(c.mlp_ratio * double(C));
    n += c.context * C;                             // pos_embed
    const int64_t block = 2 * (2 * C)               // norm1, norm2: weight + bias
                          + C * qkv_out + qkv_out   // attn.qkv
                          + C * C + C               // attn.proj
                          + C * F + F + F * C + C;  // mlp.fc1, mlp.fc2
    n += L * block + 2 * C;                         // + norm_f weight + bias
  } else {
    int64_t F = c.swiglu_hidden;
    if (F == 0) F = int64_t(std::ceil(8.0 * double(C) / 3.0 / 64.0)) * 64;
    const int64_t block = 2 * C          // norm1, norm2: weight
                          + C * qkv_out  // attn.qkv, no bias
                          + C * C        // attn.proj
                          + 3 * C * F;   // mlp.w1, w2, w3
    n += L * block + C;                  // + norm_f weight
  }
  if (!c.tie_embeddings) n += V * C;  // lm_head
  return n;
}

std::set<std::string> names_of(const Gpt& model) {
  std::set<std::string> out;
  for (auto& p : model.named_parameters()) out.insert(p.name);
  return out;
}

TEST(Gpt, ShapesParameterCountAndNames) {
  for (const std::string style : {"gpt2", "llama"}) {
    for (bool tied : {true, false}) {
      SCOPED_TRACE(style + (tied ? " tied" : " untied"));
      GptConfig c = small(style);
      c.tie_embeddings = tied;
      Gpt model(c);
      model.init_parameters(0);
      Tensor logits = model.forward(random_ids(3, 10, c.vocab_size, 1));
      EXPECT_EQ(logits.shape(), (loom::Shape{3, 10, c.vocab_size}));
      EXPECT_EQ(logits.dtype(), loom::DType::F32);
      EXPECT_EQ(model.num_parameters(), expected_parameters(c));
      EXPECT_EQ(int64_t(model.blocks.size()), c.depth);

      const auto names = names_of(model);
      const bool llama = style == "llama";
      auto has = [&](const std::string& n) { return names.count(n) == 1; };
      EXPECT_TRUE(has("tok_embed.weight"));
      EXPECT_EQ(has("pos_embed.weight"), !llama);
      EXPECT_TRUE(has("blocks.1.attn.qkv.weight"));
      EXPECT_TRUE(has("blocks.1.attn.proj.weight"));
      EXPECT_EQ(has("blocks.1.attn.qkv.bias"), !llama);
      EXPECT_TRUE(has("blocks.0.norm1.weight"));
      EXPECT_EQ(has("blocks.0.norm1.bias"), !llama);
      EXPECT_EQ(has("blocks.1.mlp.fc1.weight"), !llama);
      EXPECT_EQ(has("blocks.1.mlp.fc2.bias"), !llama);
      EXPECT_EQ(has("blocks.1.mlp.w1.weight"), llama);
      EXPECT_EQ(has("blocks.1.mlp.w2.weight"), llama);
      EXPECT_EQ(has("blocks.1.mlp.w3.weight"), llama);
      EXPECT_TRUE(has("norm_f.weight"));
      EXPECT_EQ(has("lm_head.weight"), !tied);
      EXPECT_FALSE(has("lm_head.bias"));
      EXPECT_EQ(model.lm_head == nullptr, tied);
    }
  }
  // The presets: gpt2 ties, llama unties; llama's default SwiGLU width is 8/3 C up to 64.
  EXPECT_TRUE(GptConfig::gpt2().tie_embeddings);
  EXPECT_FALSE(GptConfig::llama().tie_embeddings);
  EXPECT_EQ(GptConfig::llama().mlp_hidden(), 1024);  // width 384
  EXPECT_EQ(GptConfig::gpt2().mlp_hidden(), 1536);
}

TEST(Gpt, InitIsNormal002AndKeyedByName) {
  Gpt model(small("llama"));
  model.init_parameters(3);
  for (auto& p : model.named_parameters()) {
    const auto v = loom::to_vector(p.tensor);
    double sum = 0, sq = 0;
    for (float e : v) sum += e, sq += double(e) * e;
    const double mean = sum / double(v.size()),
                 std = std::sqrt(sq / double(v.size()) - mean * mean);
    if (p.name.find("norm") != std::string::npos) {
      EXPECT_EQ(mean, 1.0) << p.name;
    } else if (v.size() >= 1000) {
      EXPECT_NEAR(std, 0.02, 0.002) << p.name;
    }
  }
  Gpt again(small("llama"));
  again.init_parameters(3);
  auto a = model.named_parameters(), b = again.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(loom::to_vector(a[i].tensor), loom::to_vector(b[i].tensor)) << a[i].name;
}

TEST(Gpt, ConfigErrorsNameTheField) {
  auto message = [](const GptConfig& c) -> std::string {
    try {
      c.validate();
    } catch (const loom::Error& e) {
      return e.what();
    }
    return "";
  };
  GptConfig c;
  EXPECT_EQ(message(c), "");
  EXPECT_EQ(message(GptConfig::llama()), "");
  c.width = 100;
  EXPECT_NE(message(c).find("width 100 is not divisible by heads 6"), std::string::npos);
  c = GptConfig::llama();
  c.kv_heads = 4;
  EXPECT_NE(message(c).find("heads 6 is not a multiple of kv_heads 4"), std::string::npos);
  try {
    loom::models::gpt_style_from_name("mamba", "model.style");
    ADD_FAILURE() << "style mamba accepted";
  } catch (const loom::Error& e) {
    EXPECT_EQ(std::string(e.message()),
              "model.style 'mamba' is not known (expected gpt2 or llama)");
  }
  c = GptConfig{};
  c.swiglu_hidden = 512;
  EXPECT_NE(message(c).find("swiglu_hidden 512 is only used by style \"llama\""),
            std::string::npos);
  c = GptConfig::llama();
  c.rope_theta = 0;
  EXPECT_NE(message(c).find("rope_theta"), std::string::npos);
  c = GptConfig{};
  c.depth = 0;
  EXPECT_NE(message(c).find("depth must be positive, got 0"), std::string::npos);
  c = GptConfig::llama();
  c.width = 30;
  c.heads = 10;  // head dim 3: RoPE needs an even one
  EXPECT_NE(message(c).find("even head dim"), std::string::npos);
  // The constructor validates, and forward checks the sequence length against the context.
  c = GptConfig{};
  c.heads = 5;
  EXPECT_THROW(Gpt{c}, loom::Error);
  Gpt model(small("gpt2"));
  model.init_parameters(0);
  try {
    model.forward(random_ids(1, 17, 32, 0));
    ADD_FAILURE() << "T = 17 > context 16 was accepted";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 17 must be in [1, context = 16]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Gpt, CausalChangingATokenNeverChangesEarlierLogits) {
  for (const std::string style : {"gpt2", "llama", "hybrid"}) {
    SCOPED_TRACE(style);
    GptConfig c = small(style == "hybrid" ? "llama" : style);
    if (style == "hybrid") c.mixers = "MA", c.ssm.state = 8, c.ssm.head_dim = 16, c.ssm.chunk = 4;
    Gpt model(c);
    model.init_parameters(4);
    loom::NoGradGuard no_grad;
    const int64_t B = 2, T = c.context, V = c.vocab_size;
    Tensor ids = random_ids(B, T, V, 5);
    const auto base = loom::to_vector(model.forward(ids));
    for (int64_t t : {0L, 1L, 7L, T - 1}) {
      auto changed_ids = loom::to_vector_i64(ids);
      for (int64_t b = 0; b < B; ++b) {
        auto& e = changed_ids[size_t(b * T + t)];
        e = (e + 1 + b) % V;
      }
      const auto out = loom::to_vector(model.forward(loom::from_vector(changed_ids, {B, T})));
      for (int64_t b = 0; b < B; ++b) {
        double later = 0;
        for (int64_t s = 0; s < T; ++s)
          for (int64_t v = 0; v < V; ++v) {
            const size_t i = size_t((b * T + s) * V + v);
            if (s < t)
              ASSERT_NEAR(out[i], base[i], 1e-6) << "token " << t << " changed logit at " << s;
            else
              later = std::max(later, double(std::abs(out[i] - base[i])));
          }
        EXPECT_GT(later, 1e-4) << "changing token " << t << " changed nothing at or after it";
      }
    }
  }
}

// Sliding-window attention, against the model without a window: with one block and RoPE
// (relative positions), the windowed model's logits at t are the plain model's (same weights)
// on the window's W tokens alone at their positions; with two blocks a token reaches 2 (W - 1)
// positions ahead and no further, in both styles.
TEST(Gpt, SlidingWindowSeesTheLastWindowTokens) {
  const int64_t W = 4;
  {
    GptConfig c = small("llama");
    c.depth = 1;
    GptConfig windowed = c;
    windowed.window = W;
    Gpt plain(c), model(windowed);
    plain.init_parameters(7);
    model.init_parameters(7);  // keyed by name: the same weights
    loom::NoGradGuard no_grad;
    const int64_t T = c.context, V = c.vocab_size;
    const Tensor ids = random_ids(1, T, V, 8);
    const std::vector<float> all = loom::to_vector(model.forward(ids));
    const std::vector<int64_t> id = loom::to_vector_i64(ids);
    for (int64_t t = W - 1; t < T; ++t) {
      const std::vector<int64_t> window(id.begin() + t - W + 1, id.begin() + t + 1);
      std::vector<int64_t> pos;
      for (int64_t p = t - W + 1; p <= t; ++p) pos.push_back(p);
      const std::vector<float> alone = loom::to_vector(
          plain.forward(loom::from_vector(window, {1, W}), loom::from_vector(pos, {W})));
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(all[size_t(t * V + v)], alone[size_t((W - 1) * V + v)], 2e-5)
            << "position " << t;
    }
  }
  for (const std::string style : {"gpt2", "llama"}) {
    SCOPED_TRACE(style);
    GptConfig c = small(style);
    c.window = W;
    Gpt model(c);
    model.init_parameters(9);
    loom::NoGradGuard no_grad;
    const int64_t T = c.context, V = c.vocab_size, s = 3, reach = 2 * (W - 1);
    const Tensor ids = random_ids(1, T, V, 10);
    const std::vector<float> base = loom::to_vector(model.forward(ids));
    std::vector<int64_t> changed = loom::to_vector_i64(ids);
    changed[size_t(s)] = (changed[size_t(s)] + 1) % V;
    const std::vector<float> out =
        loom::to_vector(model.forward(loom::from_vector(changed, {1, T})));
    for (int64_t t = 0; t < T; ++t) {
      double diff = 0;
      for (int64_t v = 0; v < V; ++v)
        diff = std::max(diff, double(std::abs(out[size_t(t * V + v)] - base[size_t(t * V + v)])));
      if (t < s || t > s + reach)
        EXPECT_LT(diff, 1e-6) << "token " << s << " reached position " << t;
      else if (t == s || t == s + reach)
        EXPECT_GT(diff, 1e-5) << "token " << s << " did not reach position " << t;
    }
  }
}

TEST(Gpt, InitialLossIsLogVocab) {
  for (const std::string style : {"gpt2", "llama"}) {
    SCOPED_TRACE(style);
    GptConfig c = small(style);
    c.vocab_size = 256;
    c.width = 64;
    Gpt model(c);
    model.init_parameters(6);
    loom::NoGradGuard no_grad;
    const double l =
        loom::item(model.loss(random_ids(4, c.context, 256, 7), random_ids(4, c.context, 256, 8)));
    EXPECT_NEAR(l, std::log(256.0), 0.1);
  }
}

// Mean cross-entropy of f32 logits (B, T, V) against targets, accumulated in f64 on the host.
double host_loss(const Tensor& logits, const std::vector<int64_t>& targets) {
  const auto z = loom::to_vector_f64(logits);
  const int64_t V = logits.size(-1), N = int64_t(targets.size());
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double* row = &z[size_t(n * V)];
    double m = row[0];
    for (int64_t v = 1; v < V; ++v) m = std::max(m, row[v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] - m);
    total += m + std::log(s) - row[targets[size_t(n)]];
  }
  return total / double(N);
}

// Central differences of the whole model's loss against backward(), for a few elements of
// every parameter. The weights are drawn with std 0.4 (norm gains around 1) instead of 0.02 so
// that gradients are O(1e-2..1) and the f32 forward's rounding (~1e-7 relative on each logit,
// summed in f64) is far below eps^2-sized truncation error: with eps = 1e-2 the loss difference
// is ~1e-3 against ~1e-6 of noise. Tolerance: |fd - grad| <= 2e-2 |grad| + 2e-4.
TEST(Gpt, GradientMatchesFiniteDifferences) {
  // "hybrid": llama style with a Mamba-2 block first (its scan in chunks of 2 over 5 tokens).
  // "mla": llama style with latent attention (latents of 3, q through one of 3, a rope part of
  // 2 beside the head's 4, so the values are padded for the kernel).
  for (const std::string style : {"gpt2", "llama", "hybrid", "mla"}) {
    SCOPED_TRACE(style);
    GptConfig c = style == "gpt2" ? GptConfig::gpt2() : GptConfig::llama();
    if (style == "hybrid") {
      c.mixers = "MA";
      c.ssm.state = 3, c.ssm.head_dim = 4, c.ssm.groups = 2, c.ssm.chunk = 2;
    }
    if (style == "mla") c.mla_kv_rank = 3, c.mla_q_rank = 3, c.mla_rope_dim = 2;
    c.vocab_size = 11;
    c.context = 5;
    c.width = 8;
    c.depth = 2;
    c.heads = 2;
    if (c.is_llama() && !c.is_mla()) c.kv_heads = 1;
    if (!c.is_llama()) c.mlp_ratio = 2.0;
    if (c.is_llama()) c.swiglu_hidden = 12;
    Gpt model(c);
    for (auto& p : model.named_parameters()) {
      const bool gain = p.name.find("norm") != std::string::npos && p.name.size() > 6 &&
                        p.name.substr(p.name.size() - 6) == "weight";
      loom::fill_normal(p.tensor, loom::RngKey{9, "gradcheck", p.name}, 0, gain ? 1.0f : 0.0f,
                        gain ? 0.2f : 0.4f);
    }
    const int64_t B = 2, T = 5;
    Tensor ids = random_ids(B, T, c.vocab_size, 10);
    const std::vector<int64_t> targets = loom::to_vector_i64(random_ids(B, T, c.vocab_size, 11));
    Tensor target_tensor = loom::from_vector(targets, {B, T});

    Tensor loss = model.loss(ids, target_tensor);
    {
      loom::NoGradGuard no_grad;
      EXPECT_NEAR(loom::item(loss), host_loss(model.forward(ids), targets), 1e-5);
    }
    loom::backward(loss);

    int checked = 0;
    double worst = 0;
    for (auto& p : model.named_parameters()) {
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      const auto grad = loom::to_vector(p.tensor.grad());
      float* w = p.tensor.data<float>();
      const int64_t n = p.tensor.numel();
      // Three spread-out elements (gpt2's qkv.bias[n / 2] is a key bias, whose gradient is
      // exactly zero: softmax ignores a shift shared by all keys). For the token embedding,
      // rows of tokens in the batch plus one absent token's row, whose gradient comes only
      // from the output head when tied and is zero when untied.
      std::vector<int64_t> picks = {0, n / 2, n - 1};
      if (p.name == "tok_embed.weight") {
        const auto id = loom::to_vector_i64(ids);
        const std::set<int64_t> present(id.begin(), id.end());
        int64_t absent = 0;
        while (present.count(absent)) ++absent;
        ASSERT_LT(absent, c.vocab_size);
        picks = {id[0] * c.width, id[3] * c.width + 5, id[7] * c.width + 7, absent * c.width + 2};
      }
      // The Mamba-2 layer's gated RMSNorm sees small inputs, where a step of 1e-2 is no longer
      // in its linear range; 1e-3 is, still far above the f32 noise.
      const double eps = style == "hybrid" || style == "mla" ? 1e-3 : 1e-2;
      for (int64_t i : picks) {
        const float saved = w[i];
        loom::NoGradGuard no_grad;
        w[i] = saved + float(eps);
        const double up = host_loss(model.forward(ids), targets);
        w[i] = saved - float(eps);
        const double down = host_loss(model.forward(ids), targets);
        w[i] = saved;
        const double fd = (up - down) / (2 * eps), g = grad[size_t(i)];
        EXPECT_NEAR(g, fd, 2e-2 * std::abs(fd) + 2e-4) << p.name << "[" << i << "]";
        if (std::abs(fd) > 1e-3) worst = std::max(worst, std::abs(g - fd) / std::abs(fd));
        ++checked;
      }
    }
    EXPECT_GE(checked, 3 * (style == "hybrid" ? 19 : 17));
    std::printf("[gpt gradcheck %s] %d elements, worst relative error %.2e\n", style.c_str(),
                checked, worst);
  }
}

// The exposed pieces (embed, blocks, head) rebuild forward, so activation checkpointing can be
// applied from outside: wrapping every block in loom::checkpoint gives the same loss and
// gradients.
TEST(Gpt, CheckpointedBlocksFromOutsideGiveTheSameGradients) {
  for (const std::string style : {"gpt2", "llama"}) {
    SCOPED_TRACE(style);
    const GptConfig c = small(style);
    Gpt model(c);
    model.init_parameters(13);
    Tensor ids = random_ids(2, 12, c.vocab_size, 14), targets = random_ids(2, 12, c.vocab_size, 15);
    Tensor plain = model.loss(ids, targets);
    loom::backward(plain);
    std::vector<std::vector<float>> grads;
    for (auto& p : model.named_parameters()) {
      grads.push_back(loom::to_vector(p.tensor.grad()));
      p.tensor.set_grad(Tensor());
    }
    Tensor pos = model.default_positions(12);
    Tensor h = model.embed(ids, pos);  // (B, T, C)
    for (const auto& block : model.blocks)
      h = loom::checkpoint(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{block->forward(in[0], pos)};
          },
          {h})[0];
    Tensor recomputed = loom::cross_entropy(model.head(h), targets);
    EXPECT_EQ(loom::item(recomputed), loom::item(plain));
    loom::backward(recomputed);
    auto params = model.named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto g = loom::to_vector(params[i].tensor.grad());
      ASSERT_EQ(g.size(), grads[i].size()) << params[i].name;
      for (size_t j = 0; j < g.size(); ++j)
        ASSERT_NEAR(g[j], grads[i][j], 1e-6 + 1e-5 * std::abs(grads[i][j])) << params[i].name;
    }
  }
}

TEST(Gpt, AdamWLearnsARepeatingSequence) {
  for (const std::string style : {"gpt2", "llama"}) {
    SCOPED_TRACE(style);
    GptConfig c = small(style);
    c.vocab_size = 16;
    Gpt model(c);
    model.init_parameters(12);
    loom::optim::AdamW opt(model.named_parameters(), {.lr = 3e-3});
    // Windows at different offsets of one periodic sequence: the next token is a function of
    // the previous two, so the loss can go to ~0.
    const std::vector<int64_t> period = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    const int64_t B = 4, T = c.context, P = int64_t(period.size());
    std::vector<int64_t> x(size_t(B * T)), y(size_t(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        x[size_t(b * T + t)] = period[size_t((2 * b + t) % P)];
        y[size_t(b * T + t)] = period[size_t((2 * b + t + 1) % P)];
      }
    Tensor ids = loom::from_vector(x, {B, T}), targets = loom::from_vector(y, {B, T});
    double first = 0, last = 0;
    const int steps = 100;
    for (int step = 0; step < steps; ++step) {
      Tensor loss = model.loss(ids, targets);
      loom::backward(loss);
      opt.step(3e-3);
      opt.zero_grad();
      const double l = loom::item(loss);
      ASSERT_TRUE(std::isfinite(l)) << "step " << step;
      if (step == 0) first = l;
      if (step == steps - 1) last = l;
    }
    EXPECT_LT(last, 0.3 * first) << "first loss " << first << ", last " << last;
    std::printf("[gpt train %s] loss %.3f -> %.3f in %d steps\n", style.c_str(), first, last,
                steps);
  }
}

}  // namespace
