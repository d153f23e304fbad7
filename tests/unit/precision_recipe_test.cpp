// Low-precision recipes on a linear layer (precision/recipe.h): each of the three products
// multiplies the operands the recipe prescribes -- checked against a float64 product of
// operands quantised here from the recipe table (written out below, not taken from the
// code), in the layouts the hardware sees (the reduction along each operand's rows); delayed
// scaling takes its scale from the previous steps; bf16 blocks stay out; bad input is refused.
//
// Tolerance: the emulated products accumulate in f32, so a K-term sum is within K 2^-24
// sum|a b| of exact; checked against 4x that.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "expect_error.h"
#include "loom/autograd/engine.h"
#include "loom/nn/layers.h"
#include "loom/ops/ops.h"
#include "loom/precision/recipe.h"

namespace loom::precision {
namespace {

// A model of `depth` blocks, each one linear layer (in -> out), as recipes find them.
struct Blocks : nn::Module {
  std::vector<std::shared_ptr<nn::Linear>> blocks;
  Blocks(int64_t depth, int64_t in, int64_t out) {
    for (int64_t i = 0; i < depth; ++i)
      blocks.push_back(register_module("blocks." + std::to_string(i),
                                       std::make_shared<nn::Linear>(in, out, true)));
    init_parameters(5);
  }
};

// The recipe table of recipe.h, written out: element and scaling per operand role.
struct Format {
  Element element;
  Scaling scaling;
};
Format expected_format(Recipe r, GemmOperand role) {
  const bool grad = role == GemmOperand::OutputGrad, weight = role == GemmOperand::Weight;
  if (r == Recipe::Fp8Tensorwise) return {grad ? Element::E5M2 : Element::E4M3, Scaling::Tensor};
  if (r == Recipe::Fp8Blockwise)
    return {Element::E4M3, weight ? Scaling::Block128 : Scaling::Tile1x128};
  if (r == Recipe::Mxfp8) return {Element::E4M3, Scaling::Mx};
  return {Element::E2M1, weight ? Scaling::Nvfp4Square : Scaling::Nvfp4};  // nvfp4
}

std::vector<float> transposed(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = m[size_t(r * cols + c)];
  return t;
}

// m (rows, K) quantised as `f` with tile edge `block` (fp8_blockwise's).
std::vector<float> quantised(const std::vector<float>& m, int64_t rows, int64_t K, Format f,
                             int64_t block) {
  std::vector<float> out(m.size());
  QuantizeOptions o;
  if (f.scaling == Scaling::Tile1x128 || f.scaling == Scaling::Block128) o.block = block;
  fake_quantize(m.data(), rows, K, f.element, f.scaling, out.data(), o);
  return out;
}

// got (M, N) against a (M, K) b (N, K)^T in float64, within the f32 accumulation bound.
void expect_product(const std::vector<float>& got, const std::vector<float>& a,
                    const std::vector<float>& b, int64_t M, int64_t N, int64_t K,
                    const std::vector<float>& add = {}) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = add.empty() ? 0.0 : double(add[size_t(n)]), mag = std::fabs(s);
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(a[size_t(m * K + k)]) * double(b[size_t(n * K + k)]);
        s += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(got[size_t(m * N + n)], s, 4.0 * double(K + 1) * std::ldexp(1.0, -24) * mag)
          << m << " " << n;
    }
}

TEST(Recipe, EachProductMultipliesTheOperandsTheRecipePrescribes) {
  // Sizes that split into no whole tiles: partial tiles on every edge.
  const int64_t M = 40, K = 72, N = 24, block = 16;
  for (Recipe r : {Recipe::Fp8Tensorwise, Recipe::Fp8Blockwise, Recipe::Mxfp8, Recipe::Nvfp4}) {
    SCOPED_TRACE(recipe_name(r));
    RecipeConfig c = default_recipe_config(r);
    c.bf16_blocks = {};
    c.block_size = block;
    c.hadamard = c.stochastic_rounding = false;  // both checked below
    Blocks model(1, K, N);
    LowPrecision low(model, c);
    ASSERT_EQ(low.quantised_layers(), 1);
    Tensor x = randn({M, K}, RngKey{1, "recipe_test", "x"});
    x.set_requires_grad(true);
    const Tensor dy = randn({M, N}, RngKey{1, "recipe_test", "dy"});
    const nn::Linear& lin = *model.blocks[0];
    low.begin_step(0);
    AutocastGuard bf16(DType::BF16);  // recipes act in the training step's bf16 region
    const Tensor y = lin.forward(x);
    backward(sum(mul(y, dy)));  // dL/dy = dy

    const std::vector<float> xv = to_vector(x), wv = to_vector(lin.weight), gv = to_vector(dy),
                             bv = to_vector(lin.bias);
    const Format in = expected_format(r, GemmOperand::Input),
                 w = expected_format(r, GemmOperand::Weight),
                 g = expected_format(r, GemmOperand::OutputGrad);
    // y (M, N) = Q(x) Q(W)^T + b: x (M, K), W (N, K).
    expect_product(to_vector(y), quantised(xv, M, K, in, block), quantised(wv, N, K, w, block), M,
                   N, K, bv);
    // dx (M, K) = Q(dy) Q(W^T)^T: dy (M, N), W^T (K, N).
    expect_product(to_vector(x.grad()), quantised(gv, M, N, g, block),
                   quantised(transposed(wv, N, K), K, N, w, block), M, K, N);
    // dW (N, K) = Q(dy^T) Q(x^T)^T: dy^T (N, M), x^T (K, M).
    expect_product(to_vector(lin.weight.grad()), quantised(transposed(gv, M, N), N, M, g, block),
                   quantised(transposed(xv, M, K), K, M, in, block), N, K, M);
    const RoleStats s = low.stats(GemmOperand::Input);
    EXPECT_EQ(s.values, 2 * M * K);  // forward and the weight gradient
  }
}

// The weight gradient of nvfp4 with its Hadamard transform and stochastic rounding, against
// the exact product: both change what is multiplied (the rotation is undone by the product up
// to quantisation), so the result must differ from the plain recipe and stay near exact.
TEST(Recipe, Nvfp4HadamardAndStochasticRoundingKeepTheWeightGradientNearExact) {
  const int64_t M = 64, K = 32, N = 16;
  auto weight_grad = [&](bool hadamard, bool sr) {
    RecipeConfig c = default_recipe_config(Recipe::Nvfp4);
    c.bf16_blocks = {};
    c.hadamard = hadamard;
    c.stochastic_rounding = sr;
    Blocks model(1, K, N);
    LowPrecision low(model, c);
    const Tensor x = randn({M, K}, RngKey{2, "recipe_test", "x"});
    const Tensor dy = randn({M, N}, RngKey{2, "recipe_test", "dy"});
    low.begin_step(0);
    AutocastGuard bf16(DType::BF16);
    backward(sum(mul(model.blocks[0]->forward(x), dy)));
    return to_vector(model.blocks[0]->weight.grad());
  };
  const std::vector<float> plain = weight_grad(false, false), rotated = weight_grad(true, false),
                           stochastic = weight_grad(false, true);
  const Tensor x = randn({M, K}, RngKey{2, "recipe_test", "x"});
  const Tensor dy = randn({M, N}, RngKey{2, "recipe_test", "dy"});
  const std::vector<float> xv = to_vector(x), gv = to_vector(dy);
  for (const auto* v : {&rotated, &stochastic}) {
    EXPECT_NE(*v, plain);
    double err = 0, ref = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        double s = 0;
        for (int64_t m = 0; m < M; ++m)
          s += double(gv[size_t(m * N + n)]) * double(xv[size_t(m * K + k)]);
        err += std::pow((*v)[size_t(n * K + k)] - s, 2);
        ref += s * s;
      }
    EXPECT_LT(std::sqrt(err / ref), 0.25);  // E2M1 keeps 2 significant bits: ~10-20% error
  }
}

TEST(Recipe, DelayedScalingTakesItsScaleFromThePreviousSteps) {
  const int64_t M = 8, K = 32, N = 8;
  RecipeConfig c = default_recipe_config(Recipe::Fp8Delayed);
  c.amax_history = 2;
  Blocks model(1, K, N);
  LowPrecision low(model, c);
  const nn::Linear& lin = *model.blocks[0];
  const Tensor x = randn({M, K}, RngKey{3, "recipe_test", "x"});
  float amax = 0;
  for (float v : to_vector(x)) amax = std::max(amax, std::fabs(v));
  auto step = [&](int64_t s, float factor) {
    low.begin_step(s);
    AutocastGuard bf16(DType::BF16);
    backward(sum(lin.forward(mul_scalar(x, factor))));
    low.end_step([](std::vector<float>&) {});  // one process: nothing to reduce over
    return low.stats(GemmOperand::Input);
  };
  // Step 0 has no history: current scaling, nothing saturates.
  EXPECT_EQ(step(0, 1.0f).saturated, 0);
  // Step 1 sees 4x larger inputs with step 0's amax: what exceeds it saturates.
  EXPECT_GT(step(1, 4.0f).saturated, 0);
  // Step 2's history holds steps 0 and 1: their max (step 1's) covers the inputs again.
  EXPECT_EQ(step(2, 4.0f).saturated, 0);
  // The history as a checkpoint keeps it (two entries per role, oldest first), and set back.
  const auto h = low.histories();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].first, "blocks.0/input");
  ASSERT_EQ(h[0].second.size(), 2u);
  EXPECT_FLOAT_EQ(h[0].second[0], 4 * amax);
  Blocks other(1, K, N);
  LowPrecision restored(other, c);
  restored.set_histories(h);
  EXPECT_EQ(restored.histories(), h);
  expect_error(
      [&] {
        restored.set_histories({{"blocks.7/input", {1.0f}}});
      },
      {"belongs to no quantised"});
}

TEST(Recipe, EvaluationInF32SeesTheWeightsExact) {
  Blocks model(1, 32, 8);
  LowPrecision low(model, default_recipe_config(Recipe::Mxfp8));
  const Tensor x = randn({4, 32}, RngKey{4, "recipe_test", "x"});
  const nn::Linear& lin = *model.blocks[0];
  AutocastGuard f32(DType::F32);
  EXPECT_EQ(to_vector(lin.forward(x)), to_vector(linear(x, lin.weight, lin.bias)));
}

TEST(Recipe, Bf16BlocksStayOutAndBadInputIsRefused) {
  Blocks model(4, 16, 16);
  LowPrecision nvfp4(model, default_recipe_config(Recipe::Nvfp4));  // blocks 0 and 3 in bf16
  EXPECT_EQ(nvfp4.quantised_layers(), 2);
  EXPECT_NE(nvfp4.describe().find("blocks 0, 3 in bf16"), std::string::npos) << nvfp4.describe();
  RecipeConfig c = default_recipe_config(Recipe::Mxfp8);
  c.bf16_blocks = {4};
  Blocks m2(4, 16, 16);
  expect_error([&] { LowPrecision(m2, c); }, {"block 4 does not exist"});
  c = default_recipe_config(Recipe::Fp8Blockwise);
  c.block_size = 96;
  Blocks m3(4, 16, 16);
  expect_error([&] { LowPrecision(m3, c); }, {"power of two from 16 to 1024"});
  expect_error([] { recipe_from_name("fp4", "config x.toml"); },
               {"config x.toml: unknown low-precision recipe 'fp4' (known: fp8_tensorwise, "
                "fp8_delayed, fp8_blockwise, mxfp8, nvfp4)"});
}

}  // namespace
}  // namespace loom::precision
