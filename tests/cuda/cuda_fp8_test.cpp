// fp8 with one scale per tensor on the device: the cast (Backend::fp8_quantize) gives the codes
// the recipes' own emulation (precision::fake_quantize, the reference) gives, bit for bit, with
// the same counts; the fp8 GEMM (Backend::fp8_matmul) is the float64 product of its decoded
// operands; and fp8_tensorwise / fp8_delayed on a linear layer whose tensors live on the
// device multiply what the recipe prescribes in all three products. Each backend check runs
// on the CPU twin too.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "device_tensors.h"
#include "loom/autograd/engine.h"
#include "loom/backend/backend.h"
#include "loom/backend/fp8_scaling.h"
#include "loom/nn/layers.h"
#include "loom/ops/ops.h"
#include "loom/precision/quantize.h"
#include "loom/precision/recipe.h"

namespace {

using loom::DType;
using loom::Tensor;
namespace precision = loom::precision;

using loom::test::kCuda;
using loom::test::on;
using loom::test::same_float;
using loom::test::to_host;

// Values of every scale: normals over 12 binades, values small enough to flush, zeros.
std::vector<float> spread(int64_t n, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> binade(-30, 5);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng) * std::ldexp(1.0f, binade(rng));
  v[3] = 0.0f;
  return v;
}

struct CastCase {
  const char* what;
  DType dtype;
  float amax;  // < 0: measured
};

TEST(CudaFp8, CastGivesTheRecipesCodesBitForBit) {
  const int64_t rows = 37, cols = 53, out_rows = 48, out_cols = 64;  // zero padding on both edges
  const std::vector<float> values = spread(rows * cols, 3);
  float measured = 0;
  for (float v : values) measured = std::max(measured, std::fabs(v));
  const Tensor x_host = loom::from_vector(values, {rows, cols});
  const CastCase cases[] = {
      {"e4m3 current", DType::F8E4M3, -1.0f},
      {"e5m2 current", DType::F8E5M2, -1.0f},
      {"e4m3 delayed, saturating", DType::F8E4M3, measured / 64},  // a history below this step
      {"e5m2 delayed, flushing", DType::F8E5M2, measured * 1e6f},  // one far above it
  };
  for (loom::Device device : {loom::cpu_device(), kCuda}) {
    loom::Backend& backend = loom::backend_for(device);
    for (const CastCase& c : cases) {
      SCOPED_TRACE(std::string(c.what) + " on " + device.str());
      const bool e4m3 = c.dtype == DType::F8E4M3;
      std::vector<float> expected(values.size());
      precision::QuantizeOptions options;
      options.amax = c.amax;
      const precision::QuantizeStats s = precision::fake_quantize(
          values.data(), rows, cols, e4m3 ? precision::Element::E4M3 : precision::Element::E5M2,
          precision::Scaling::Tensor, expected.data(), options);

      const Tensor x = on(x_host, device);
      const Tensor q = Tensor::empty({out_rows, out_cols}, c.dtype, device);
      const Tensor inv = Tensor::empty({1}, DType::F32, device);
      const Tensor stats = Tensor::empty({3}, DType::I64, device);
      backend.fill(stats, 0.0);
      backend.fp8_quantize(x, c.amax, q, inv, stats);
      backend.fp8_quantize(x, c.amax, q, inv, stats);  // the counts add up over calls
      const Tensor qh = to_host(q);
      const uint8_t* codes = static_cast<const uint8_t*>(qh.raw_ptr());
      const float inv_scale = loom::to_vector(to_host(inv))[0];
      int64_t mismatched = 0, padding = 0;
      for (int64_t r = 0; r < out_rows; ++r)
        for (int64_t k = 0; k < out_cols; ++k) {
          const uint8_t code = codes[r * out_cols + k];
          if (r >= rows || k >= cols) {
            padding += code != 0;
            continue;
          }
          const float got = loom::fp8_decode(code, e4m3) * inv_scale;
          mismatched += !same_float(got, expected[size_t(r * cols + k)]);
        }
      EXPECT_EQ(mismatched, 0);
      EXPECT_EQ(padding, 0);
      const Tensor sh = to_host(stats);
      const int64_t* st = sh.data<int64_t>();
      EXPECT_EQ(loom::f32_from_bits(uint32_t(st[0])), s.amax);
      EXPECT_EQ(st[1], 2 * s.saturated);
      EXPECT_EQ(st[2], 2 * s.flushed);
      if (c.amax > measured) {
        EXPECT_GT(s.flushed, 0);
      }
      if (c.amax >= 0 && c.amax < measured) {
        EXPECT_GT(s.saturated, 0);
      }
    }
    // A non-finite value makes every code NaN, so the step guard sees the loss go NaN.
    std::vector<float> bad = values;
    bad[17] = INFINITY;
    const Tensor x = on(loom::from_vector(bad, {rows, cols}), device);
    const Tensor q = Tensor::empty({rows, cols}, DType::F8E4M3, device);
    const Tensor inv = Tensor::empty({1}, DType::F32, device);
    const Tensor stats = Tensor::empty({3}, DType::I64, device);
    backend.fill(stats, 0.0);
    backend.fp8_quantize(x, -1.0f, q, inv, stats);
    EXPECT_TRUE(std::isnan(loom::to_vector(to_host(inv))[0])) << device.str();
    const Tensor qh = to_host(q);
    const uint8_t* codes = static_cast<const uint8_t*>(qh.raw_ptr());
    int64_t not_nan = 0;
    for (int64_t i = 0; i < rows * cols; ++i)
      not_nan += !std::isnan(loom::fp8_decode(codes[i], true));
    EXPECT_EQ(not_nan, 0) << device.str();
  }
}

// Random codes of a dtype (NaN codes left out) and a scale: a (rows, K) operand.
Tensor random_codes(int64_t rows, int64_t k, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  Tensor t = Tensor::empty({rows, k}, dtype);
  uint8_t* p = static_cast<uint8_t*>(t.raw_ptr());
  const bool e4m3 = dtype == DType::F8E4M3;
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint8_t c;
    do c = uint8_t(byte(rng));
    while (!std::isfinite(loom::fp8_decode(c, e4m3)));
    p[i] = c;
  }
  return t;
}

TEST(CudaFp8, GemmIsTheFloat64ProductOfItsDecodedOperands) {
  const int64_t M = 5, K = 48, N = 32;
  const std::pair<DType, DType> types[] = {{DType::F8E4M3, DType::F8E4M3},
                                           {DType::F8E5M2, DType::F8E4M3},
                                           {DType::F8E4M3, DType::F8E5M2}};
  const std::vector<float> bias_values = spread(N, 9);
  for (loom::Device device : {loom::cpu_device(), kCuda}) {
    loom::Backend& backend = loom::backend_for(device);
    for (const auto& [ta, tb] : types)
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(std::string(loom::dtype_name(ta)) + " x " + loom::dtype_name(tb) +
                     (with_bias ? " + bias" : "") + " on " + device.str());
        const Tensor a_host = random_codes(M, K, ta, 1), b_host = random_codes(N, K, tb, 2);
        const float sa = 0.0078125f * 3, sb = 1.0f / 448;  // dequantisation scales
        const Tensor a = on(a_host, device), b = on(b_host, device);
        const Tensor a_inv = on(loom::from_vector(std::vector<float>{sa}, {1}), device);
        const Tensor b_inv = on(loom::from_vector(std::vector<float>{sb}, {1}), device);
        const Tensor bias = with_bias ? on(loom::from_vector(bias_values, {N}), device) : Tensor();
        const Tensor out = Tensor::empty({M, N}, DType::F32, device);
        backend.fp8_matmul(a, a_inv, b, b_inv, bias, out);
        const std::vector<float> got = loom::to_vector(to_host(out));
        const uint8_t* A = static_cast<const uint8_t*>(a_host.raw_ptr());
        const uint8_t* B = static_cast<const uint8_t*>(b_host.raw_ptr());
        double worst = 0;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = with_bias ? double(bias_values[size_t(n)]) : 0.0, mag = std::fabs(s);
            for (int64_t k = 0; k < K; ++k) {
              const double p = double(loom::fp8_decode(A[m * K + k], ta == DType::F8E4M3)) * sa *
                               double(loom::fp8_decode(B[n * K + k], tb == DType::F8E4M3)) * sb;
              s += p;
              mag += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(got[size_t(m * N + n)] - s) / mag);
          }
        // Relative to the magnitude summed; a wrong scale, layout or code is off by O(1) of
        // it. The host sums in f32: 2^-12. Hopper's fp8 tensor cores keep about 14 bits of
        // their running sum (DeepSeek-V3 report, section 3.3.2; cuBLASLt widens it to f32 only
        // between runs of K longer than this one): 2^-10, seen 3.8e-4 on an H200.
        EXPECT_LT(worst, std::ldexp(1.0, device.type == loom::DeviceType::CPU ? -12 : -10));
      }
    // The shapes the tensor cores take, and no E5M2 x E5M2 (which they lack).
    const Tensor s1 = on(loom::from_vector(std::vector<float>{1.0f}, {1}), device);
    const Tensor out = Tensor::empty({M, N}, DType::F32, device);
    auto error_of = [&](const Tensor& a, const Tensor& b, const Tensor& o) {
      try {
        backend.fp8_matmul(a, s1, b, s1, Tensor(), o);
      } catch (const loom::Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const Tensor a40 = on(random_codes(M, 40, DType::F8E4M3, 3), device);
    const Tensor b40 = on(random_codes(N, 40, DType::F8E4M3, 4), device);
    EXPECT_NE(error_of(a40, b40, out).find("multiples of 16"), std::string::npos);
    const Tensor a5 = on(random_codes(M, K, DType::F8E5M2, 5), device);
    const Tensor b5 = on(random_codes(N, K, DType::F8E5M2, 6), device);
    EXPECT_NE(error_of(a5, b5, out).find("not both f8e5m2"), std::string::npos);
  }
}

// A model of one block holding one linear layer, as the recipes find them.
struct OneBlock : loom::nn::Module {
  std::shared_ptr<loom::nn::Linear> linear;
  OneBlock(int64_t in, int64_t out) {
    linear = register_module("blocks.0", std::make_shared<loom::nn::Linear>(in, out, true));
    init_parameters(5);
    const std::vector<float> bias = spread(out, 11);  // not the zeros it starts from
    std::copy(bias.begin(), bias.end(), linear->bias.data<float>());
  }
};

std::vector<float> transposed(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = m[size_t(r * cols + c)];
  return t;
}

// m (rows, K) as the recipe's reference quantises it.
std::vector<float> quantised(const std::vector<float>& m, int64_t rows, int64_t k,
                             precision::Element e, float amax) {
  std::vector<float> out(m.size());
  precision::QuantizeOptions o;
  o.amax = amax;
  precision::fake_quantize(m.data(), rows, k, e, precision::Scaling::Tensor, out.data(), o);
  return out;
}

// got (M, N) against a (M, K) b (N, K)^T (+ add) in float64.
void expect_product(const std::vector<float>& got, const std::vector<float>& a,
                    const std::vector<float>& b, int64_t M, int64_t N, int64_t K,
                    const std::vector<float>& add = {}) {
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = add.empty() ? 0.0 : double(add[size_t(n)]), mag = std::fabs(s);
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(a[size_t(m * K + k)]) * double(b[size_t(n * K + k)]);
        s += p;
        mag += std::fabs(p);
      }
      worst = std::max(worst, std::fabs(got[size_t(m * N + n)] - s) / mag);
    }
  EXPECT_LT(worst, std::ldexp(1.0, -12));
}

// M, K, N not multiples of 16: the device path pads K and N with zeros for the tensor cores.
TEST(CudaFp8, RecipesOnDeviceTensorsMultiplyWhatTheyPrescribe) {
  const int64_t M = 40, K = 72, N = 24;
  using loom::GemmOperand;
  using precision::Element;
  for (precision::Recipe r : {precision::Recipe::Fp8Tensorwise, precision::Recipe::Fp8Delayed}) {
    SCOPED_TRACE(precision::recipe_name(r));
    precision::RecipeConfig c = precision::default_recipe_config(r);
    std::vector<precision::RoleStats> host_stats;
    for (loom::Device device : {loom::cpu_device(), kCuda}) {
      SCOPED_TRACE(device.str());
      OneBlock model(K, N);
      precision::LowPrecision low(model, c);
      model.to(device);
      // Delayed scaling: a history half this step's input amax, so that some inputs saturate.
      const Tensor x_host = loom::randn({M, K}, loom::RngKey{1, "fp8_test", "x"});
      const std::vector<float> xv = loom::to_vector(x_host);
      float x_amax = 0;
      for (float v : xv) x_amax = std::max(x_amax, std::fabs(v));
      if (r == precision::Recipe::Fp8Delayed) low.set_histories({{"blocks.0/input", {x_amax / 2}}});
      Tensor x = on(x_host, device);
      x.set_requires_grad(true);
      const Tensor dy_host = loom::randn({M, N}, loom::RngKey{1, "fp8_test", "dy"});
      const Tensor dy = on(dy_host, device);
      low.begin_step(0);
      Tensor y;
      {
        loom::AutocastGuard bf16(DType::BF16);  // recipes act in the step's bf16 region
        y = model.linear->forward(x);
        loom::backward(loom::sum(loom::mul(y, dy)));
      }
      const std::vector<float> wv = loom::to_vector(to_host(model.linear->weight)),
                               bv = loom::to_vector(to_host(model.linear->bias)),
                               gv = loom::to_vector(dy_host);
      const float x_scale_amax = r == precision::Recipe::Fp8Delayed ? x_amax / 2 : -1.0f;
      expect_product(loom::to_vector(to_host(y)), quantised(xv, M, K, Element::E4M3, x_scale_amax),
                     quantised(wv, N, K, Element::E4M3, -1), M, N, K, bv);
      expect_product(loom::to_vector(to_host(x.grad())), quantised(gv, M, N, Element::E5M2, -1),
                     quantised(transposed(wv, N, K), K, N, Element::E4M3, -1), M, K, N);
      expect_product(loom::to_vector(to_host(model.linear->weight.grad())),
                     quantised(transposed(gv, M, N), N, M, Element::E5M2, -1),
                     quantised(transposed(xv, M, K), K, M, Element::E4M3, x_scale_amax), N, K, M);
      // The counts the device kept are the host's: the operands are the same values.
      std::vector<precision::RoleStats> stats;
      for (GemmOperand role : {GemmOperand::Input, GemmOperand::Weight, GemmOperand::OutputGrad})
        stats.push_back(low.stats(role));
      EXPECT_EQ(stats[0].values, 2 * M * K);
      if (r == precision::Recipe::Fp8Delayed) {
        EXPECT_GT(stats[0].saturated, 0);
      }
      if (host_stats.empty()) {
        host_stats = stats;
        continue;
      }
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(stats[k].values, host_stats[k].values) << k;
        EXPECT_EQ(stats[k].saturated, host_stats[k].saturated) << k;
        EXPECT_EQ(stats[k].flushed, host_stats[k].flushed) << k;
        EXPECT_EQ(stats[k].amax, host_stats[k].amax) << k;
      }
    }
  }
}

}  // namespace
