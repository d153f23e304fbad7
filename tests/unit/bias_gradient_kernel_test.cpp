// The CPU kernels that sum bias gradients over many rows, on shapes that split into several
// chunks of rows, against float64 loops:
//   sum_middle (the sum over the middle dim of (outer, n, inner): a plain bias gradient),
//   gelu_bias_backward (gpre = gout * gelu'(pre) and the column sums of gpre in one pass),
//   also with a bf16 gpre from f32 operands (autocast's GEMM operand),
//   cast_with_column_sums (an f32 gradient rounded to bf16, its f32 column sums in one pass;
//   or a bf16 gradient's sums alone).
//
// Tolerance of the sums: the kernels accumulate in float64 and round once, so an f32 result is
// within one f32 rounding (2^-24 relative) of the exact sum, checked against 2^-23 * sum|x| per
// column. A bf16 output adds one bf16 rounding (2^-9), checked against 2^-8.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/core/tensor.h"
#include "loom/ops/creation.h"

namespace loom {
namespace {

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor f = Tensor::empty(shape, DType::F32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = uniform(rng);
  return dtype == DType::F32 ? f : to_dtype(f, dtype);
}

std::vector<float> values_of(const Tensor& t) {
  const Tensor f = t.dtype() == DType::F32 ? t : to_dtype(t, DType::F32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

struct SumCase {
  int64_t outer, n, inner;
};

class SumMiddle : public ::testing::TestWithParam<SumCase> {};

TEST_P(SumMiddle, MatchesFloat64Sum) {
  const SumCase c = GetParam();
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_tensor({c.outer, c.n, c.inner}, dtype, 7);
    Tensor out = Tensor::empty({c.outer, c.inner}, dtype);
    cpu_backend().sum_middle(x, out);
    const std::vector<float> xv = values_of(x), got = values_of(out);
    const double bound = dtype == DType::F32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -8);
    for (int64_t i = 0; i < c.outer; ++i)
      for (int64_t col = 0; col < c.inner; ++col) {
        double sum = 0.0, abs_sum = 0.0;
        for (int64_t r = 0; r < c.n; ++r) {
          const double v = xv[(i * c.n + r) * c.inner + col];
          sum += v;
          abs_sum += std::fabs(v);
        }
        ASSERT_NEAR(got[i * c.inner + col], sum, bound * std::max(abs_sum, std::fabs(sum)))
            << "outer " << i << ", column " << col;
      }
  }
}

// Row chunks are 512 rows: cover one chunk, several, a ragged last one, and several outer
// indices.
INSTANTIATE_TEST_SUITE_P(Shapes, SumMiddle,
                         ::testing::Values(SumCase{1, 3, 5}, SumCase{1, 512, 256},
                                           SumCase{1, 1300, 300}, SumCase{3, 1025, 513},
                                           SumCase{2, 2049, 17}));

// The row chunks are fixed, not per thread: one thread and two give the same bits.
TEST(SumMiddle, SameBitsOnOneThreadAndTwo) {
  const Tensor x = random_tensor({2, 3000, 260}, DType::F32, 11);
  Tensor one = Tensor::empty({2, 260}, DType::F32), two = Tensor::empty({2, 260}, DType::F32);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu_backend().sum_middle(x, one);
  omp_set_num_threads(2);
  cpu_backend().sum_middle(x, two);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.data_ptr(), two.data_ptr(), one.numel() * sizeof(float)), 0);
}

double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// gpre against the float64 derivative (f32 math with a fast exp: within 1e-5 of max |gpre|),
// the bias gradient against the float64 column sums of the kernel's own f32 gpre values
// (the rounding bound above), and the same bits on one thread and two.
TEST(GeluBiasBackward, MatchesFloat64AndIsDeterministic) {
  const int64_t rows = 1300, n = 70;
  Tensor pre = random_tensor({rows, n}, DType::F32, 3),
         gout = random_tensor({rows, n}, DType::F32, 4);
  for (int64_t i = 0; i < pre.numel(); ++i) pre.data<float>()[i] *= 4.0f;  // both GELU tails
  Tensor gpre = Tensor::empty({rows, n}, DType::F32), gbias = Tensor::empty({n}, DType::F32);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  cpu_backend().gelu_bias_backward(pre, gout, gpre, gbias);
  double max_ref = 0.0;
  std::vector<double> ref(size_t(rows * n));
  for (int64_t i = 0; i < rows * n; ++i) {
    ref[i] = double(gout.data<float>()[i]) * gelu_tanh_grad(pre.data<float>()[i]);
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  for (int64_t i = 0; i < rows * n; ++i)
    ASSERT_NEAR(gpre.data<float>()[i], ref[i], 1e-5 * max_ref) << "element " << i;
  for (int64_t c = 0; c < n; ++c) {
    double sum = 0.0, abs_sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += gpre.data<float>()[r * n + c];
      abs_sum += std::fabs(gpre.data<float>()[r * n + c]);
    }
    ASSERT_NEAR(gbias.data<float>()[c], sum, std::ldexp(1.0, -23) * abs_sum) << "column " << c;
  }
  Tensor gpre1 = Tensor::empty({rows, n}, DType::F32), gbias1 = Tensor::empty({n}, DType::F32);
  omp_set_num_threads(1);
  cpu_backend().gelu_bias_backward(pre, gout, gpre1, gbias1);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(gbias.data_ptr(), gbias1.data_ptr(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gpre.data_ptr(), gpre1.data_ptr(), rows * n * sizeof(float)), 0);
  // Rows of any stride (padded like a GEMM operand) give the same values.
  Tensor padded = Tensor::empty({rows, n + 16}, DType::F32);
  Tensor gpre_padded = padded.as_strided({rows, n}, {n + 16, 1}, 0);
  Tensor gbias_padded = Tensor::empty({n}, DType::F32);
  cpu_backend().gelu_bias_backward(pre, gout, gpre_padded, gbias_padded);
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_EQ(std::memcmp(gpre.data<float>() + r * n, padded.data<float>() + r * (n + 16),
                          n * sizeof(float)),
              0)
        << "row " << r;
  EXPECT_EQ(std::memcmp(gbias.data_ptr(), gbias_padded.data_ptr(), n * sizeof(float)), 0);
  // Without a bias gradient only gpre is written.
  Tensor gpre2 = Tensor::empty({rows, n}, DType::F32);
  cpu_backend().gelu_bias_backward(pre, gout, gpre2, Tensor());
  EXPECT_EQ(std::memcmp(gpre.data_ptr(), gpre2.data_ptr(), rows * n * sizeof(float)), 0);
}

// Autocast's form: f32 pre and gout, gpre stored as bf16. Each gpre element is the bf16
// rounding of the f32 kernel's value; the bias gradient sums the f32 values, not their
// rounding: against the float64 sum of the f32 path's gpre within one f32 rounding, a bound
// that summing the bf16 values would miss by far (their roundings, 2^-9 relative each, add up
// to about 2^-9 sqrt(rows) of a column's typical term). Same bits on one thread and two.
TEST(GeluBiasBackward, Bf16GradientOfF32OperandsSumsTheF32Values) {
  const int64_t rows = 1300, n = 70;
  Tensor pre = random_tensor({rows, n}, DType::F32, 5),
         gout = random_tensor({rows, n}, DType::F32, 6);
  for (int64_t i = 0; i < pre.numel(); ++i) pre.data<float>()[i] *= 4.0f;
  Tensor gpre32 = Tensor::empty({rows, n}, DType::F32), gbias32 = Tensor::empty({n}, DType::F32);
  cpu_backend().gelu_bias_backward(pre, gout, gpre32, gbias32);
  const int threads = omp_get_max_threads();
  Tensor gpre[2], gbias[2];
  for (int t = 0; t < 2; ++t) {
    gpre[t] = Tensor::empty({rows, n}, DType::BF16), gbias[t] = Tensor::empty({n}, DType::F32);
    omp_set_num_threads(t + 1);
    cpu_backend().gelu_bias_backward(pre, gout, gpre[t], gbias[t]);
  }
  omp_set_num_threads(threads);
  const std::vector<float> rounded = values_of(to_dtype(gpre32, DType::BF16));
  const std::vector<float> got = values_of(gpre[1]);
  for (int64_t i = 0; i < rows * n; ++i) ASSERT_EQ(got[i], rounded[i]) << "element " << i;
  double worst_bf16_sum_error = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    double sum = 0.0, abs_sum = 0.0, bf16_sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const double v = gpre32.data<float>()[r * n + c];
      sum += v;
      abs_sum += std::fabs(v);
      bf16_sum += got[r * n + c];
    }
    const double bound = std::ldexp(1.0, -23) * abs_sum;
    ASSERT_NEAR(gbias[1].data<float>()[c], sum, bound) << "column " << c;
    worst_bf16_sum_error = std::max(worst_bf16_sum_error, std::fabs(bf16_sum - sum) / bound);
  }
  EXPECT_GT(worst_bf16_sum_error, 10.0);  // the check above can tell the two sums apart
  EXPECT_EQ(std::memcmp(gbias[0].data_ptr(), gbias[1].data_ptr(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gpre[0].data_ptr(), gpre[1].data_ptr(), rows * n * 2), 0);
}

// A bf16 gpre is only for f32 operands; other dtype pairs are refused, with the dtypes named.
TEST(GeluBiasBackward, RefusesOtherDtypePairs) {
  const Tensor pre = random_tensor({4, 8}, DType::BF16, 1),
               gout = random_tensor({4, 8}, DType::BF16, 2);
  Tensor gpre = Tensor::empty({4, 8}, DType::F32);
  try {
    cpu_backend().gelu_bias_backward(pre, gout, gpre, Tensor());
    FAIL() << "an f32 gpre for bf16 operands was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("gpre f32"), std::string::npos) << e.what();
  }
}

// An f32 gradient rounded to bf16 into a padded operand, and its column sums: the bf16 copy
// bit for bit the rounding of a plain cast, the sums of the f32 values within one f32 rounding
// of float64 (a bound the sum of the bf16 values misses, checked); same bits on one thread
// and two; a dtype other than f32 -> bf16 refused.
TEST(CastWithColumnSums, RoundsAndSumsTheF32Values) {
  const int64_t rows = 1300, n = 70;
  const Tensor x = random_tensor({rows, n}, DType::F32, 8);
  const std::vector<float> rounded = values_of(to_dtype(x, DType::BF16)), xv = values_of(x);
  const int threads = omp_get_max_threads();
  Tensor storage[2], sums[2];
  for (int t = 0; t < 2; ++t) {
    storage[t] = zeros({rows, n + 8}, DType::BF16);
    sums[t] = Tensor::empty({n}, DType::F32);
    omp_set_num_threads(t + 1);
    cpu_backend().cast_with_column_sums(x, storage[t].as_strided({rows, n}, {n + 8, 1}, 0),
                                        sums[t]);
  }
  omp_set_num_threads(threads);
  const std::vector<float> got = values_of(storage[1]);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n + 8; ++c)
      ASSERT_EQ(got[r * (n + 8) + c], c < n ? rounded[r * n + c] : 0.0f) << r << ", " << c;
  double worst_bf16 = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    double sum = 0.0, abs_sum = 0.0, bf16_sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += xv[r * n + c];
      abs_sum += std::fabs(xv[r * n + c]);
      bf16_sum += rounded[r * n + c];
    }
    const double bound = std::ldexp(1.0, -23) * abs_sum;
    ASSERT_NEAR(sums[1].data<float>()[c], sum, bound) << "column " << c;
    worst_bf16 = std::max(worst_bf16, std::fabs(bf16_sum - sum) / bound);
  }
  EXPECT_GT(worst_bf16, 10.0);
  EXPECT_EQ(std::memcmp(sums[0].data_ptr(), sums[1].data_ptr(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(storage[0].data_ptr(), storage[1].data_ptr(), rows * (n + 8) * 2), 0);
  Tensor wrong = Tensor::empty({rows, n}, DType::F32);
  EXPECT_THROW(cpu_backend().cast_with_column_sums(x, wrong, sums[0]), Error);
}

// A gradient that already is bf16 (the output of a linear kept in bf16) gets its column sums
// alone: bit for bit the sums the f32 route takes of the same values widened, within one f32
// rounding of float64, the same on one thread and two; an output beside a bf16 input, or none
// beside an f32 one, refused.
TEST(CastWithColumnSums, SumsABf16GradientAlone) {
  const int64_t rows = 1300, n = 70;
  const Tensor low = to_dtype(random_tensor({rows, n}, DType::F32, 9), DType::BF16);
  const Tensor wide = to_dtype(low, DType::F32);  // exact
  const int threads = omp_get_max_threads();
  Tensor sums[2];
  for (int t = 0; t < 2; ++t) {
    sums[t] = Tensor::empty({n}, DType::F32);
    omp_set_num_threads(t + 1);
    cpu_backend().cast_with_column_sums(low, Tensor(), sums[t]);
  }
  omp_set_num_threads(threads);
  Tensor f32_route = Tensor::empty({n}, DType::F32), copy = Tensor::empty({rows, n}, DType::BF16);
  cpu_backend().cast_with_column_sums(wide, copy, f32_route);
  EXPECT_EQ(std::memcmp(sums[1].data_ptr(), f32_route.data_ptr(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(sums[0].data_ptr(), sums[1].data_ptr(), n * sizeof(float)), 0);
  const std::vector<float> xv = values_of(low);
  for (int64_t c = 0; c < n; ++c) {
    double sum = 0.0, abs_sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += xv[r * n + c];
      abs_sum += std::fabs(xv[r * n + c]);
    }
    ASSERT_NEAR(sums[1].data<float>()[c], sum, std::ldexp(1.0, -23) * abs_sum) << "column " << c;
  }
  EXPECT_THROW(cpu_backend().cast_with_column_sums(low, copy, sums[0]), Error);
  EXPECT_THROW(cpu_backend().cast_with_column_sums(wide, Tensor(), sums[0]), Error);
}

// Too few rows to share out by chunks (GPT-2's 4 x 64 tokens are one chunk), the pass is
// shared by blocks of columns as well: a single chunk of 300 rows by 700 columns, and 3
// chunks by 300 columns. The values and sums as above, the same bits on 1, 2 and 3 threads.
TEST(ColumnSums, FewRowsSharedOutByColumns) {
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{300, 700}, {1100, 300}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(n));
    const Tensor pre = random_tensor({rows, n}, DType::F32, 12),
                 gout = random_tensor({rows, n}, DType::F32, 13);
    const std::vector<float> xv = values_of(pre);
    const int threads = omp_get_max_threads();
    Tensor gpre[3], gbias[3], low[3], sums[3];
    for (int t = 0; t < 3; ++t) {
      gpre[t] = Tensor::empty({rows, n}, DType::F32), gbias[t] = Tensor::empty({n}, DType::F32);
      low[t] = Tensor::empty({rows, n}, DType::BF16), sums[t] = Tensor::empty({n}, DType::F32);
      omp_set_num_threads(t + 1);
      cpu_backend().gelu_bias_backward(pre, gout, gpre[t], gbias[t]);
      cpu_backend().cast_with_column_sums(pre, low[t], sums[t]);
    }
    omp_set_num_threads(threads);
    const std::vector<float> g = values_of(gpre[1]),
                             rounded = values_of(to_dtype(pre, DType::BF16));
    const std::vector<float> got_low = values_of(low[1]);
    double gmax = 0.0;
    for (int64_t i = 0; i < rows * n; ++i) gmax = std::max(gmax, std::fabs(double(g[i])));
    for (int64_t i = 0; i < rows * n; ++i) {
      ASSERT_NEAR(g[i], gout.data<float>()[i] * gelu_tanh_grad(xv[i]), 1e-5 * gmax) << i;
      ASSERT_EQ(got_low[i], rounded[i]) << i;
    }
    for (int64_t c = 0; c < n; ++c) {
      double gsum = 0.0, gabs = 0.0, xsum = 0.0, xabs = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        gsum += g[r * n + c], gabs += std::fabs(g[r * n + c]);
        xsum += xv[r * n + c], xabs += std::fabs(xv[r * n + c]);
      }
      ASSERT_NEAR(gbias[1].data<float>()[c], gsum, std::ldexp(1.0, -23) * gabs) << c;
      ASSERT_NEAR(sums[1].data<float>()[c], xsum, std::ldexp(1.0, -23) * xabs) << c;
    }
    for (int t : {0, 2}) {
      EXPECT_EQ(std::memcmp(gpre[t].data_ptr(), gpre[1].data_ptr(), rows * n * 4), 0) << t + 1;
      EXPECT_EQ(std::memcmp(gbias[t].data_ptr(), gbias[1].data_ptr(), n * 4), 0) << t + 1;
      EXPECT_EQ(std::memcmp(low[t].data_ptr(), low[1].data_ptr(), rows * n * 2), 0) << t + 1;
      EXPECT_EQ(std::memcmp(sums[t].data_ptr(), sums[1].data_ptr(), n * 4), 0) << t + 1;
    }
  }
}

}  // namespace
}  // namespace loom
