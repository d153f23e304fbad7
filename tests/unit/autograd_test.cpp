// The backward engine: accumulation, hooks, independent graphs, no-grad, checkpointing.
#include <gtest/gtest.h>

#include "loom/autograd/engine.h"
#include "loom/ops/ops.h"

namespace {

using loom::Tensor;

Tensor leaf(std::vector<float> v, loom::Shape s) {
  Tensor t = loom::from_vector(v, s);
  t.set_requires_grad(true);
  return t;
}

TEST(Autograd, GradientsAccumulateAcrossUsesAndCalls) {
  Tensor x = leaf({1, 2, 3}, {3});
  // y = sum(x * x + x): dy/dx = 2x + 1, x used twice in the graph.
  Tensor y = loom::sum(loom::add(loom::mul(x, x), x));
  loom::backward(y);
  EXPECT_EQ(loom::to_vector(x.grad()), (std::vector<float>{3, 5, 7}));
  // A second backward on a new graph accumulates into .grad.
  loom::backward(loom::sum(x));
  EXPECT_EQ(loom::to_vector(x.grad()), (std::vector<float>{4, 6, 8}));
  EXPECT_EQ(x.grad().storage()->category(), loom::MemCategory::Gradients);
}

// A split backward (zero-bubble pipelines): under a DeferredWeightGradients scope a linear's
// backward makes the input's and the bias's gradients only; run() then adds the weight's,
// firing its hooks, and every gradient equals the plain backward's. Checked against dW = dy^T x
// written out here for y = sum(x W^T + b) (dy = 1): dW[n][k] = sum over rows of x[m][k].
TEST(Autograd, DeferredWeightGradientsComeOnlyWhenRun) {
  const std::vector<float> xv = {1, 2, 3, 4, 5, 6};  // (3, 2)
  Tensor x = leaf(xv, {3, 2}), w = leaf({1, 0, 0, 1}, {2, 2}), b = leaf({0, 0}, {2});
  int hooked = 0;
  w.add_post_accumulate_hook([&](const Tensor&) { ++hooked; });
  loom::DeferredWeightGradients later;
  {
    loom::DeferredWeightGradients::Scope scope(later);
    loom::backward(loom::sum(loom::linear(x, w, b)));
  }
  EXPECT_FALSE(w.grad().defined()) << "the weight's gradient was made in the split backward";
  EXPECT_EQ(hooked, 0);
  EXPECT_EQ(loom::to_vector(x.grad()), (std::vector<float>{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(loom::to_vector(b.grad()), (std::vector<float>{3, 3}));
  later.run();
  EXPECT_EQ(hooked, 1);
  const float k0 = xv[0] + xv[2] + xv[4], k1 = xv[1] + xv[3] + xv[5];
  EXPECT_EQ(loom::to_vector(w.grad()), (std::vector<float>{k0, k1, k0, k1}));
  // Outside a scope nothing is deferred.
  loom::backward(loom::sum(loom::linear(x, w, b)));
  EXPECT_EQ(loom::to_vector(w.grad()), (std::vector<float>{2 * k0, 2 * k1, 2 * k0, 2 * k1}));
}

TEST(Autograd, PostAccumulateHooksRunOncePerAccumulation) {
  Tensor w = leaf({1, -1}, {2});
  int calls = 0;
  std::vector<float> seen;
  w.add_post_accumulate_hook([&](const Tensor& t) {
    calls++;
    seen = loom::to_vector(t.grad());
  });
  // w used in two places: the hook fires after the gradient is complete, i.e. once.
  Tensor y = loom::sum(loom::add(loom::mul_scalar(w, 2.0), loom::mul_scalar(w, 3.0)));
  loom::backward(y);
  EXPECT_EQ(calls, 2);  // one accumulation per incoming edge into the leaf
  EXPECT_EQ(seen, (std::vector<float>{5, 5}));
}

// A table used by a lookup and densely (a tied embedding and its head): when the dense use's
// gradient is in .grad first, the lookup adds its rows into it in place (Node::backward_into),
// repeated indices included; hooks still fire once per accumulation. Expected values by hand.
TEST(Autograd, LookupGradientAddsIntoAnExistingLeafGradient) {
  Tensor w = leaf({1, 2, 3, 4, 5, 6}, {3, 2});  // (V = 3, C = 2)
  int calls = 0;
  w.add_post_accumulate_hook([&](const Tensor&) { calls++; });
  const Tensor index = loom::from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  const Tensor rows_weight =
      loom::from_vector(std::vector<float>{1, 10, 100, 1000, 0.5f, 0.25f}, {3, 2});
  Tensor looked_up = loom::mul(loom::index_select(w, 0, index), rows_weight);  // made first
  Tensor dense = loom::mul_scalar(w, 3.0);  // made later: its backward runs first
  loom::backward(loom::add(loom::sum(looked_up), loom::sum(dense)));
  // d/dw: 3 everywhere, plus the row weights added at rows 2, 0, 2.
  EXPECT_EQ(loom::to_vector(w.grad()), (std::vector<float>{103, 1003, 3, 3, 4.5f, 13.25f}));
  EXPECT_EQ(calls, 2);
}

TEST(Autograd, IndependentGraphsCoexist) {
  Tensor w = leaf({2}, {1});
  // Two micro-batches build graphs on the same parameter before either runs backward.
  Tensor a = loom::sum(loom::mul(w, loom::from_vector(std::vector<float>{3}, {1})));
  Tensor b = loom::sum(loom::mul(w, loom::from_vector(std::vector<float>{5}, {1})));
  loom::backward(b);
  EXPECT_EQ(loom::item(w.grad()), 5.0f);
  loom::backward(a);
  EXPECT_EQ(loom::item(w.grad()), 8.0f);
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y;
  {
    loom::NoGradGuard guard;
    y = loom::mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(loom::backward(loom::sum(y)), loom::Error);
}

TEST(Autograd, BackwardOfANonScalarNeedsAGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = loom::mul_scalar(x, 3.0);
  EXPECT_THROW(loom::backward(y), loom::Error);
  loom::backward(y, loom::from_vector(std::vector<float>{1, 10}, {2}));
  EXPECT_EQ(loom::to_vector(x.grad()), (std::vector<float>{3, 30}));
}

TEST(Autograd, SavedTensorsAreReleasedAfterBackward) {
  auto& a = loom::host_allocator();
  Tensor x = leaf(std::vector<float>(1000, 1.0f), {1000});
  const int64_t base = a.stats().live_total;
  Tensor y = loom::sum(loom::exp(loom::mul(x, x)));  // saves x*x for exp's backward
  EXPECT_GT(a.stats().live_total, base);
  loom::backward(y);
  y = Tensor();
  x.set_grad(Tensor());
  EXPECT_EQ(a.stats().live_total, base);
}

// A small two-layer block with captured parameters, as a transformer block would be.
struct Block {
  Tensor w1 = loom::randn({8, 6}, loom::RngKey{1, "init", "w1"});
  Tensor w2 = loom::randn({6, 8}, loom::RngKey{1, "init", "w2"});
  Tensor norm = loom::randn({8}, loom::RngKey{1, "init", "norm"});
  Block() {
    w1.set_requires_grad(true);
    w2.set_requires_grad(true);
    norm.set_requires_grad(true);
  }
  Tensor operator()(const Tensor& x) const {
    Tensor h = loom::gelu(loom::linear(x, w1));
    h = loom::layer_norm(h, norm, Tensor());
    return loom::add(x, loom::linear(h, w2));
  }
};

// q, k and v cut from one projection output: the attention backward writes their gradients
// into one buffer of that layout and the split takes it whole. The result must equal the one
// through separate q, k, v copies (the ordinary path: three buffers, copied into place).
TEST(Autograd, AttentionGradientsJoinedInPlaceMatchSeparateOnes) {
  const int64_t B = 2, S = 5, Hq = 2, Hkv = 1, D = 4, W = (Hq + 2 * Hkv) * D;
  auto gradient = [&](bool separate) {
    Tensor x = loom::randn({B, S, W}, loom::RngKey{3, "test", "qkv"});
    x.set_requires_grad(true);
    auto parts = loom::split(x, std::vector<int64_t>{Hq * D, Hkv * D, Hkv * D}, -1);
    auto heads = [&](const Tensor& t, int64_t h) {
      Tensor v = loom::permute(loom::reshape(t, {B, S, h, D}), {0, 2, 1, 3});
      return separate ? loom::contiguous(v) : v;
    };
    Tensor o = loom::scaled_dot_product_attention(heads(parts[0], Hq), heads(parts[1], Hkv),
                                                  heads(parts[2], Hkv), Tensor(), true);
    Tensor r = loom::randn(o.shape(), loom::RngKey{3, "test", "r"});
    loom::backward(loom::sum(loom::mul(o, r)));
    return loom::to_vector(x.grad());
  };
  const std::vector<float> joined = gradient(false), separate = gradient(true);
  ASSERT_EQ(joined.size(), separate.size());
  for (size_t i = 0; i < joined.size(); ++i)
    EXPECT_NEAR(joined[i], separate[i], 1e-6f) << "element " << i;
}

TEST(Checkpoint, GivesIdenticalGradientsToThePlainFunction) {
  Tensor x0 = loom::randn({4, 3, 6}, loom::RngKey{2, "data", "x"});
  enum Mode { Plain, Full, Selective };
  auto run = [&](Mode mode) {
    Block block;
    Tensor x = x0.detach();
    x.set_requires_grad(true);
    Tensor y;
    if (mode != Plain) {
      y = loom::checkpoint(
          [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0])}; }, {x},
          /*keep_expensive=*/mode == Selective)[0];
    } else {
      y = block(x);
    }
    Tensor loss = loom::sum(loom::mul(y, y));
    loom::backward(loss);
    return std::vector<std::vector<float>>{
        loom::to_vector(loss), loom::to_vector(x.grad()), loom::to_vector(block.w1.grad()),
        loom::to_vector(block.w2.grad()), loom::to_vector(block.norm.grad())};
  };
  const auto plain = run(Plain), full = run(Full), selective = run(Selective);
  ASSERT_EQ(plain.size(), full.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i], full[i]) << "full checkpointing, tensor " << i;
    EXPECT_EQ(plain[i], selective[i]) << "selective checkpointing, tensor " << i;
  }
}

TEST(Checkpoint, SelectiveKeepsTheMatmulOutputsAndNothingElse) {
  Block block;
  auto& a = loom::host_allocator();
  Tensor x = loom::randn({64, 16, 6}, loom::RngKey{3, "data", "x"});
  x.set_requires_grad(true);
  const int64_t base = a.stats().live_total;
  Tensor y = loom::checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0])}; }, {x},
      /*keep_expensive=*/true)[0];
  const int64_t kept = a.stats().live_total - base;
  // The output, and the two linears' outputs (f32): not the GELU, norm or their statistics.
  const int64_t linears = 64 * 16 * (block.w1.size(0) + block.w2.size(0)) * 4;
  EXPECT_EQ(kept, int64_t(y.nbytes()) + linears);
  loom::backward(loom::sum(y));
  EXPECT_TRUE(block.w1.grad().defined());
}

TEST(Checkpoint, KeepsOnlyItsInputsDuringForward) {
  Block block;
  auto& a = loom::host_allocator();
  Tensor x = loom::randn({64, 16, 6}, loom::RngKey{3, "data", "x"});
  x.set_requires_grad(true);
  const int64_t base = a.stats().live_total;
  Tensor y_plain = block(x);
  const int64_t plain_bytes = a.stats().live_total - base;
  y_plain = Tensor();
  const int64_t base2 = a.stats().live_total;
  Tensor y = loom::checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0])}; }, {x})[0];
  const int64_t ckpt_bytes = a.stats().live_total - base2;
  // Checkpointed: the output only (the input is shared, not copied); plain: every activation.
  EXPECT_EQ(ckpt_bytes, int64_t(y.nbytes()));
  EXPECT_GT(plain_bytes, 3 * ckpt_bytes);
  loom::backward(loom::sum(y));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(block.w1.grad().defined());
}

}  // namespace
