// GEMM operands quantised by recipe (precision/quantize.h): each scaling's groups map their
// amax to the format's largest value, delayed scaling saturates what exceeds it, NVFP4's 16 x 16
// blocks quantise a matrix and its transpose alike, stochastic rounding does not depend on how
// the operand is split, and the emulated GEMM matches a float64 product of the dequantised
// operands to the f32 accumulation bound.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/precision/quantize.h"

namespace loom::precision {
namespace {

// Values spanning eight decades: row r has magnitude 10^(2 (r mod 5) - 4).
std::vector<float> operand(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t i = uint64_t(r * cols + c);
      const double u = 2.0 * uniform_at(seed, i) - 1.0;
      x[i] = float(u * std::pow(10.0, 2.0 * double(r % 5) - 4.0));
    }
  return x;
}

TEST(Quantize, TensorwiseIsOneScaleFromTheAmax) {
  const int64_t R = 4, C = 64;
  std::vector<float> x = operand(R, C, 1), out(x.size());
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  fake_quantize(x.data(), R, C, Element::E4M3, Scaling::Tensor, out.data());
  const float s = float(448.0 / double(amax));
  for (size_t i = 0; i < x.size(); ++i)  // through the storage codec of core/dtype
    EXPECT_EQ(out[i], to_f32(to_f8e4m3(x[i] * s)) * (1.0f / s)) << i;
}

TEST(Quantize, TilesKeepSmallRowsThatOneTensorScaleFlushes) {
  // Rows from 1e-4 to 1e4 in one operand: one E4M3 scale for all flushes the small rows (below
  // half of 2^-9 x 1e4 / 448); 1x128 tiles give each row its own scale.
  const int64_t R = 5, C = 256;
  std::vector<float> x = operand(R, C, 2), tensor(x.size()), tiles(x.size());
  const QuantizeStats t =
      fake_quantize(x.data(), R, C, Element::E4M3, Scaling::Tensor, tensor.data());
  const QuantizeStats s =
      fake_quantize(x.data(), R, C, Element::E4M3, Scaling::Tile1x128, tiles.data());
  EXPECT_GT(t.flushed, 20);
  EXPECT_EQ(s.flushed, 0);
  EXPECT_EQ(t.saturated + s.saturated, 0);  // current scaling never saturates
  for (int64_t r = 0; r < R; ++r)
    for (int64_t tile = 0; tile < C / 128; ++tile) {
      float amax = 0;
      for (int64_t c = 0; c < 128; ++c)
        amax = std::max(amax, std::fabs(x[size_t(r * C + tile * 128 + c)]));
      for (int64_t c = 0; c < 128; ++c) {
        const size_t i = size_t(r * C + tile * 128 + c);
        // Half E4M3's spacing at the top (16 of 448), relative to the tile's amax; below the
        // top binade the spacing is finer.
        EXPECT_LE(std::fabs(tiles[i] - x[i]), amax * (16.0 / 448.0) * 1.0001) << i;
      }
    }
}

TEST(Quantize, Block128ScalesEachBlockOnItsOwn) {
  const int64_t R = 256, C = 256;
  std::vector<float> x(size_t(R * C));
  for (int64_t r = 0; r < R; ++r)  // block (br, bc) has magnitude 10^(br + 2 bc - 2)
    for (int64_t c = 0; c < C; ++c)
      x[size_t(r * C + c)] = float((2.0 * uniform_at(3, uint64_t(r * C + c)) - 1.0) *
                                   std::pow(10.0, double(r / 128 + 2 * (c / 128)) - 2.0));
  std::vector<float> out(x.size());
  const QuantizeStats s =
      fake_quantize(x.data(), R, C, Element::E5M2, Scaling::Block128, out.data());
  EXPECT_EQ(s.flushed, 0);
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 2; ++bc) {
      float amax = 0, got = 0;
      for (int64_t r = br * 128; r < br * 128 + 128; ++r)
        for (int64_t c = bc * 128; c < bc * 128 + 128; ++c) {
          amax = std::max(amax, std::fabs(x[size_t(r * C + c)]));
          got = std::max(got, std::fabs(out[size_t(r * C + c)]));
        }
      EXPECT_NEAR(got, amax, amax * 1e-6) << br << "," << bc;  // the amax maps to 57344 exactly
    }
}

TEST(Quantize, DelayedScalingSaturatesWhatExceedsTheHistory) {
  const int64_t R = 2, C = 128;
  std::vector<float> x = operand(R, C, 4), out(x.size());
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float stale = amax / 2;  // an amax history that lags the tensor
  const QuantizeStats s =
      fake_quantize(x.data(), R, C, Element::E4M3, Scaling::Tensor, out.data(), {.amax = stale});
  const float scale = float(448.0 / double(stale));
  int64_t want = 0;
  for (float v : x) want += std::fabs(double(v * scale)) >= 464.0;  // rounds past 448
  EXPECT_GT(want, 0);
  EXPECT_EQ(s.saturated, want);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(out[i]), stale * 1.000001f) << i;
}

TEST(Quantize, Nvfp4RowsAgreeWithTheBlockCodecAndSquareBlocksWithTheTranspose) {
  const int64_t R = 32, C = 32;
  std::vector<float> x = operand(R, C, 5), rows(x.size()), ref(x.size());
  fake_quantize(x.data(), R, C, Element::E2M1, Scaling::Nvfp4, rows.data());
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  nvfp4_dequantize(nvfp4_quantize(x.data(), R * C, amax), ref.data());
  EXPECT_EQ(rows, ref);
  // 16 x 16 blocks: quantising W^T gives the transpose of quantising W (so forward and
  // backward multiply the same weights); 1 x 16 rows do not.
  std::vector<float> xt(x.size()), sq(x.size()), sqt(x.size()), rowst(x.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) xt[size_t(c * R + r)] = x[size_t(r * C + c)];
  fake_quantize(x.data(), R, C, Element::E2M1, Scaling::Nvfp4Square, sq.data());
  fake_quantize(xt.data(), C, R, Element::E2M1, Scaling::Nvfp4Square, sqt.data());
  fake_quantize(xt.data(), C, R, Element::E2M1, Scaling::Nvfp4, rowst.data());
  int64_t square_differs = 0, rows_differ = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      square_differs += sq[size_t(r * C + c)] != sqt[size_t(c * R + r)];
      rows_differ += rows[size_t(r * C + c)] != rowst[size_t(c * R + r)];
    }
  EXPECT_EQ(square_differs, 0);
  EXPECT_GT(rows_differ, 0);
}

TEST(Quantize, StochasticRoundingDoesNotDependOnTheSplit) {
  const int64_t R = 4, C = 128;
  std::vector<float> x = operand(R, C, 6), whole(x.size()), parts(x.size());
  const StochasticRounding sr{RngKey{9, "quantize_test", "sr"}.hash(), 0};
  fake_quantize(x.data(), R, C, Element::E5M2, Scaling::Tile1x128, whole.data(), {.sr = &sr});
  for (int64_t half = 0; half < 2; ++half) {  // rows 0-1 and 2-3, each told its global offset
    const StochasticRounding part{sr.key, uint64_t(half * 2 * C)};
    fake_quantize(x.data() + half * 2 * C, 2, C, Element::E5M2, Scaling::Tile1x128,
                  parts.data() + half * 2 * C, {.sr = &part});
  }
  EXPECT_EQ(whole, parts);
  std::vector<float> nearest(x.size());
  fake_quantize(x.data(), R, C, Element::E5M2, Scaling::Tile1x128, nearest.data());
  EXPECT_NE(whole, nearest);  // the draws really changed some roundings
}

TEST(Quantize, EmulatedGemmMatchesFloat64OnTheDequantisedOperands) {
  const int64_t M = 6, N = 5, K = 128;
  for (Scaling s : {Scaling::Tensor, Scaling::Tile1x128, Scaling::Mx, Scaling::Nvfp4}) {
    SCOPED_TRACE(scaling_name(s));
    const Element e = s == Scaling::Nvfp4 ? Element::E2M1 : Element::E4M3;
    std::vector<float> a = operand(M, K, 7), b = operand(N, K, 8), qa(a.size()), qb(b.size());
    fake_quantize(a.data(), M, K, e, s, qa.data());
    fake_quantize(b.data(), N, K, e, s, qb.data());
    std::vector<float> c(size_t(M * N));
    gemm_nt(qa.data(), qb.data(), M, N, K, c.data());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(qa[size_t(m * K + k)]) * double(qb[size_t(n * K + k)]);
          exact += p;
          mag += std::fabs(p);
        }
        EXPECT_NEAR(c[size_t(m * N + n)], exact,
                    4.0 * double(K) * std::ldexp(1.0, -24) * mag + 1e-30);
      }
  }
}

TEST(Quantize, FormatsAndBlockSizesThatDoNotFitTheScalingAreRefused) {
  std::vector<float> x(2 * 128, 1.0f), out(x.size());
  auto refused = [&](Element e, Scaling s, int64_t block, const char* says) {
    try {
      fake_quantize(x.data(), 2, 128, e, s, out.data(), {.block = block});
      ADD_FAILURE() << scaling_name(s) << " took " << element_name(e) << " blocks of " << block;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(says), std::string::npos) << err.what();
    }
  };
  refused(Element::E2M1, Scaling::Tensor, 0, "does not take e2m1");
  refused(Element::E4M3, Scaling::Nvfp4, 0, "does not take e4m3");
  refused(Element::E4M3, Scaling::Mx, 16, "MX blocks are 32 values");
  refused(Element::E2M1, Scaling::Nvfp4, 32, "NVFP4 blocks are 16 values");
  refused(Element::E4M3, Scaling::Tile1x128, 100, "power of two from 16 to 1024");
  refused(Element::E4M3, Scaling::Block128, 8, "power of two from 16 to 1024");
  try {
    fake_quantize(x.data(), 2, 128, Element::E4M3, Scaling::Tensor, out.data(), {.amax = NAN});
    ADD_FAILURE() << "a NaN amax was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("amax must be finite"), std::string::npos) << err.what();
  }
}

TEST(Quantize, PartialTilesQuantiseAsTheZeroPaddedOperand) {
  // (R, C) with neither a multiple of the tiles: the same values as the operand padded with
  // zeros to (RP, CP) -- zeros do not change a group's amax.
  const int64_t R = 37, C = 70, RP = 48, CP = 96;
  const std::vector<float> x = operand(R, C, 11);
  std::vector<float> padded(size_t(RP * CP), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) padded[size_t(r * CP + c)] = x[size_t(r * C + c)];
  struct Case {
    Element e;
    Scaling s;
    int64_t block;
  };
  for (const Case& k :
       {Case{Element::E4M3, Scaling::Tile1x128, 32}, Case{Element::E5M2, Scaling::Block128, 16},
        Case{Element::E4M3, Scaling::Mx, 0}, Case{Element::E2M1, Scaling::Nvfp4, 0},
        Case{Element::E2M1, Scaling::Nvfp4Square, 0}}) {
    SCOPED_TRACE(scaling_name(k.s));
    std::vector<float> out(x.size()), ref(padded.size());
    const QuantizeStats a = fake_quantize(x.data(), R, C, k.e, k.s, out.data(), {.block = k.block});
    const QuantizeStats b =
        fake_quantize(padded.data(), RP, CP, k.e, k.s, ref.data(), {.block = k.block});
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(out[size_t(r * C + c)], ref[size_t(r * CP + c)]) << r << " " << c;
    EXPECT_EQ(a.flushed, b.flushed);
    EXPECT_EQ(a.saturated, b.saturated);
  }
}

TEST(Quantize, MxRowsAgreeWithTheBlockCodec) {
  const int64_t R = 8, C = 96;
  const std::vector<float> x = operand(R, C, 12);
  for (Element e : {Element::E4M3, Element::E5M2, Element::E2M1}) {
    std::vector<float> out(x.size()), ref(x.size());
    fake_quantize(x.data(), R, C, e, Scaling::Mx, out.data());
    mx_dequantize(mx_quantize(x.data(), R * C, e), ref.data());
    EXPECT_EQ(out, ref) << element_name(e);
  }
}

TEST(Quantize, HadamardRotationKeepsTheProductAndSpreadsAnOutlier) {
  const int64_t M = 3, N = 4, K = 32;
  std::vector<float> a = operand(M, K, 13), b = operand(N, K, 14);
  float signs[16];
  for (int i = 0; i < 16; ++i) signs[i] = uniform_at(15, uint64_t(i)) < 0.5f ? -1.0f : 1.0f;
  std::vector<float> ra = a, rb = b;
  hadamard16(ra.data(), M, K, signs);
  hadamard16(rb.data(), N, K, signs);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double before = 0, after = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        before += double(a[size_t(m * K + k)]) * double(b[size_t(n * K + k)]);
        after += double(ra[size_t(m * K + k)]) * double(rb[size_t(n * K + k)]);
        mag += std::fabs(double(a[size_t(m * K + k)]) * double(b[size_t(n * K + k)]));
      }
      EXPECT_NEAR(after, before, 1e-5 * mag + 1e-30);
    }
  // One value of 1 among zeros becomes 16 values of magnitude 1/4.
  std::vector<float> spike(16, 0.0f);
  spike[5] = 1.0f;
  hadamard16(spike.data(), 1, 16, signs);
  for (float v : spike) EXPECT_EQ(std::fabs(v), 0.25f);
}

TEST(Quantize, ANonFiniteValueMakesItsGroupNaN) {
  // So a diverged step reaches the loss (and the step guard), as under MX's NaN scale.
  std::vector<float> x = operand(2, 256, 10), out(x.size());
  x[130] = INFINITY;  // row 0, second tile
  fake_quantize(x.data(), 2, 256, Element::E4M3, Scaling::Tile1x128, out.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(std::isnan(out[i]), i >= 128 && i < 256) << i;
  fake_quantize(x.data(), 2, 256, Element::E4M3, Scaling::Tensor, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace loom::precision
