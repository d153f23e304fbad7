// Block-scaled quantisation on the device (Backend::block_quantize, hadamard16): every scaling
// the block-scaled recipes use -- fp8_blockwise's 1x128 tiles and 128x128 blocks (and other
// tile sizes), MXFP8's E8M0 scales per 32 values (E4M3 and E5M2), NVFP4's E4M3 scales per 16
// values and per 16x16 block under a tensor scale, with stochastic rounding -- gives the values
// and counts of the recipes' own emulation (precision::fake_quantize, the reference) bit for
// bit, at shapes whose edge tiles are partial, with zeros, values that flush or saturate, and
// a NaN or an infinity in a group. The Hadamard rotation gives precision::hadamard16's bits.
// Each check runs on the CPU twin too.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "device_tensors.h"
#include "loom/backend/backend.h"
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

// Values over 16 binades around 1 (some saturate their group's scale only when a scale is
// given), values small enough to flush, a zero tile, and the non-finite values asked for.
std::vector<float> operand(int64_t rows, int64_t cols, uint64_t seed, bool nan, bool inf) {
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> binade(-12, 4);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& x : v) x = normal(rng) * std::ldexp(1.0f, binade(rng));
  for (int64_t c = 0; c < std::min<int64_t>(cols, 32); ++c) v[size_t(c)] = 0.0f;  // row 0's start
  v[size_t(cols + 5)] = 1e-30f;  // flushes under any scale of its group
  if (nan) v[size_t(2 * cols + 7)] = NAN;
  if (inf) v[size_t(rows * cols - 3)] = -INFINITY;
  return v;
}

struct Case {
  const char* what;
  precision::Element element;
  precision::Scaling scaling;
  int64_t block;  // 0: the scaling's own
  float amax;     // < 0: measured
  bool stochastic;
};

TEST(CudaBlockScaling, QuantizeGivesTheRecipesValuesBitForBit) {
  const Case cases[] = {
      {"1x128 tiles", precision::Element::E4M3, precision::Scaling::Tile1x128, 0, -1, false},
      {"1x32 tiles", precision::Element::E4M3, precision::Scaling::Tile1x128, 32, -1, false},
      {"128x128 blocks", precision::Element::E4M3, precision::Scaling::Block128, 0, -1, false},
      {"16x16 blocks e5m2", precision::Element::E5M2, precision::Scaling::Block128, 16, -1, false},
      {"mx e4m3", precision::Element::E4M3, precision::Scaling::Mx, 0, -1, false},
      {"mx e5m2", precision::Element::E5M2, precision::Scaling::Mx, 0, -1, false},
      {"mx e2m1", precision::Element::E2M1, precision::Scaling::Mx, 0, -1, false},
      {"nvfp4", precision::Element::E2M1, precision::Scaling::Nvfp4, 0, -1, false},
      {"nvfp4 16x16", precision::Element::E2M1, precision::Scaling::Nvfp4Square, 0, -1, false},
      {"nvfp4 stochastic", precision::Element::E2M1, precision::Scaling::Nvfp4, 0, -1, true},
      {"nvfp4 given amax", precision::Element::E2M1, precision::Scaling::Nvfp4, 0, 0.5f, false},
      {"tensorwise given amax", precision::Element::E4M3, precision::Scaling::Tensor, 0, 0.25f,
       false},
      {"tensorwise stochastic", precision::Element::E5M2, precision::Scaling::Tensor, 0, -1, true},
  };
  // (rows, cols) with partial tiles at the right and bottom edges of every tiling above.
  const int64_t rows = 150, cols = 300;
  for (const bool nan : {false, true})
    for (const bool inf : {false, true}) {
      const std::vector<float> values = operand(rows, cols, 11, nan, inf);
      const Tensor x_host = loom::from_vector(values, {rows, cols});
      for (loom::Device device : {loom::cpu_device(), kCuda}) {
        loom::Backend& backend = loom::backend_for(device);
        for (const Case& c : cases) {
          SCOPED_TRACE(std::string(c.what) + " on " + device.str() + (nan ? ", a NaN" : "") +
                       (inf ? ", an infinity" : ""));
          precision::StochasticRounding sr{0x5eed1234abcdULL, 0};
          precision::QuantizeOptions options;
          options.block = c.block;
          options.amax = c.amax;
          if (c.stochastic) options.sr = &sr;
          std::vector<float> expected(values.size());
          const precision::QuantizeStats s = precision::fake_quantize(
              values.data(), rows, cols, c.element, c.scaling, expected.data(), options);

          const Tensor x = on(x_host, device);
          const Tensor out = Tensor::empty({rows, cols}, DType::F32, device);
          const Tensor stats = Tensor::empty({3}, DType::I64, device);
          backend.fill(stats, 0.0);
          const loom::BlockQuantizeSpec spec =
              precision::block_quantize_spec(c.element, c.scaling, options);
          backend.block_quantize(x, spec, out, stats);
          backend.block_quantize(x, spec, out, stats);  // the counts add up over calls
          const std::vector<float> got = loom::to_vector(to_host(out));
          int64_t mismatched = 0, nans = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            mismatched += !same_float(got[i], expected[i]);
            nans += std::isnan(expected[i]);
          }
          EXPECT_EQ(mismatched, 0);
          EXPECT_EQ(nans > 0, nan || inf);  // the reference made NaN groups where it should
          const Tensor sh = to_host(stats);
          const int64_t* st = sh.data<int64_t>();
          EXPECT_EQ(loom::f32_from_bits(uint32_t(st[0])), s.amax);
          EXPECT_EQ(st[1], 2 * s.saturated);
          EXPECT_EQ(st[2], 2 * s.flushed);
          if (!nan && !inf) {  // (a NaN group flushes nothing)
            EXPECT_GT(s.flushed, 0);
            if (c.amax >= 0) {
              EXPECT_GT(s.saturated, 0);  // a given amax below the measured one
            }
          }
        }
      }
    }
}

TEST(CudaBlockScaling, HadamardRotationGivesTheHostsBits) {
  const int64_t rows = 9, cols = 100, padded = 112;  // the last run padded with zeros
  const std::vector<float> values = operand(rows, cols, 5, false, false);
  std::array<float, 16> signs;
  for (int i = 0; i < 16; ++i) signs[size_t(i)] = (i * 7) % 3 == 0 ? -1.0f : 1.0f;
  std::vector<float> expected(size_t(rows * padded), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      expected[size_t(r * padded + c)] = values[size_t(r * cols + c)];
  precision::hadamard16(expected.data(), rows, padded, signs.data());
  for (loom::Device device : {loom::cpu_device(), kCuda}) {
    SCOPED_TRACE(device.str());
    const Tensor out = Tensor::empty({rows, padded}, DType::F32, device);
    loom::backend_for(device).hadamard16(on(loom::from_vector(values, {rows, cols}), device), signs,
                                         out);
    const std::vector<float> got = loom::to_vector(to_host(out));
    int64_t mismatched = 0;
    for (size_t i = 0; i < got.size(); ++i) mismatched += !same_float(got[i], expected[i]);
    EXPECT_EQ(mismatched, 0);
  }
}

}  // namespace
