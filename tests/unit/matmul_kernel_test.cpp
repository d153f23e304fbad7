// CpuBackend::matmul against a float64 triple loop, over the layouts the kernel must take
// in place (row-major, transposed, padded rows, interleaved batches, broadcast batches), the
// ones it must pack (no unit stride), bias, f32/bf16, and the shapes it must refuse.
//
// Tolerances: the reference is exact in float64 on the very values stored in the operands
// (bf16 inputs are rounded before either side sees them). Any f32 summation of K products plus
// a bias is within (K + 1) * 2^-24 * sum|a_ik b_kj| (+|bias|) of the exact value, so f32
// output is checked against twice that. A bf16 output adds one rounding, at most 2^-9 of the
// result's magnitude, checked against 2^-8.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/core/error.h"
#include "loom/core/tensor.h"

namespace loom {
namespace {

// How an operand's (batch, rows, cols) elements sit in memory.
enum class Layout {
  Row,          // dense row-major
  Col,          // dense column-major: the transpose of a row-major (cols, rows) tensor
  PaddedRow,    // row-major with a row stride larger than the width (a column slice)
  Strided2,     // every other element: no unit stride, so the kernel must pack
  Interleaved,  // (rows, batch, cols) storage viewed as (batch, rows, cols)
};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Row:
      return "row";
    case Layout::Col:
      return "col";
    case Layout::PaddedRow:
      return "padded";
    case Layout::Strided2:
      return "strided2";
    case Layout::Interleaved:
      return "interleaved";
  }
  return "?";
}

struct Case {
  int64_t batch = 1;    // of out
  int64_t a_batch = 1;  // 1 or batch
  int64_t b_batch = 1;
  bool a_stride0 = false;  // a has size `batch` but batch stride 0 (an expanded view)
  bool b_stride0 = false;
  int64_t m = 1, k = 1, n = 1;
  Layout la = Layout::Row, lb = Layout::Row;
  DType in = DType::F32, out = DType::F32;
  bool bias = false;
  DType bias_dtype = DType::F32;
  int64_t out_pad = 0;  // extra elements after each output row

  std::string str() const {
    std::ostringstream os;
    os << "batch " << batch << " (a " << a_batch << (a_stride0 ? " stride0" : "") << ", b "
       << b_batch << (b_stride0 ? " stride0" : "") << ") m " << m << " k " << k << " n " << n
       << " a " << layout_name(la) << " b " << layout_name(lb) << " " << dtype_name(in) << "->"
       << dtype_name(out) << (bias ? " bias " : "") << (bias ? dtype_name(bias_dtype) : "")
       << " out_pad " << out_pad;
    return os.str();
  }
};

float read(const Tensor& t, int64_t offset) {
  const char* base = static_cast<const char*>(t.data_ptr());
  return t.dtype() == DType::F32 ? reinterpret_cast<const float*>(base)[offset]
                                 : to_f32(reinterpret_cast<const bf16*>(base)[offset]);
}

void write(const Tensor& t, int64_t offset, float x) {
  char* base = static_cast<char*>(t.data_ptr());
  if (t.dtype() == DType::F32) {
    reinterpret_cast<float*>(base)[offset] = x;
  } else {
    reinterpret_cast<bf16*>(base)[offset] = to_bf16(x);
  }
}

// A flat tensor of n elements, all NaN (so reads of unwritten memory show up).
Tensor nan_storage(int64_t n, DType dtype) {
  Tensor t = Tensor::empty({std::max<int64_t>(n, 1)}, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) write(t, i, NAN);
  return t;
}

double at(const Tensor& t, int64_t b, int64_t r, int64_t c) {
  return read(t, b * t.stride(0) + r * t.stride(1) + c * t.stride(2));
}

// The operand's values, read through its strides, as dense (batch, rows, cols) float64.
std::vector<double> dense(const Tensor& t) {
  std::vector<double> v;
  v.reserve(size_t(t.numel()));
  for (int64_t b = 0; b < t.size(0); ++b)
    for (int64_t r = 0; r < t.size(1); ++r)
      for (int64_t c = 0; c < t.size(2); ++c) v.push_back(at(t, b, r, c));
  return v;
}

// A (batch, rows, cols) view in `layout` filled with uniform(-1, 1) values.
Tensor make_operand(int64_t batch, bool stride0, int64_t rows, int64_t cols, Layout layout,
                    DType dtype, std::mt19937& rng) {
  const int64_t nb = stride0 ? 1 : batch;  // matrices actually stored
  Shape strides;
  int64_t capacity = nb * rows * cols;
  switch (layout) {
    case Layout::Row:
      strides = {rows * cols, cols, 1};
      break;
    case Layout::Col:
      strides = {rows * cols, 1, rows};
      break;
    case Layout::PaddedRow:
      strides = {rows * (cols + 3), cols + 3, 1};
      capacity = nb * rows * (cols + 3);
      break;
    case Layout::Strided2:
      strides = {2 * rows * cols, 2 * cols, 2};
      capacity = 2 * nb * rows * cols;
      break;
    case Layout::Interleaved:
      strides = {cols, nb * cols, 1};
      break;
  }
  if (stride0) strides[0] = 0;
  Tensor view = nan_storage(capacity, dtype).as_strided({batch, rows, cols}, strides, 0);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        write(view, b * strides[0] + r * strides[1] + c * strides[2], uniform(rng));
  return view;
}

// Seeds differ per case (fresh inputs every time) but runs are reproducible.
std::mt19937 next_rng() {
  static std::atomic<uint32_t> counter{1};
  return std::mt19937(counter++);
}

void check(const Case& c) {
  SCOPED_TRACE(c.str());
  std::mt19937 rng = next_rng();
  Tensor a =
      make_operand(c.a_stride0 ? c.batch : c.a_batch, c.a_stride0, c.m, c.k, c.la, c.in, rng);
  Tensor b =
      make_operand(c.b_stride0 ? c.batch : c.b_batch, c.b_stride0, c.k, c.n, c.lb, c.in, rng);
  Tensor bias;
  if (c.bias) {
    bias = nan_storage(c.n, c.bias_dtype);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int64_t j = 0; j < c.n; ++j) write(bias, j, uniform(rng));
  }
  const int64_t ld = c.n + c.out_pad;
  Tensor out_storage = nan_storage(c.batch * c.m * ld, c.out);
  Tensor out = out_storage.as_strided({c.batch, c.m, c.n}, {c.m * ld, ld, 1}, 0);

  cpu_backend().matmul(a, b, bias, out);

  const double acc_tol = 2.0 * double(c.k + 1) * std::ldexp(1.0, -24);
  const double out_tol = c.out == DType::BF16 ? std::ldexp(1.0, -8) : 0.0;
  const std::vector<double> da = dense(a), db = dense(b);  // (batch, m, k), (batch, k, n)
  int failures = 0;
  for (int64_t bi = 0; bi < c.batch; ++bi) {
    const double* ab = da.data() + (a.size(0) == 1 ? 0 : bi) * c.m * c.k;
    const double* bb = db.data() + (b.size(0) == 1 ? 0 : bi) * c.k * c.n;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double ref = 0.0, scale = 0.0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double prod = ab[i * c.k + p] * bb[p * c.n + j];
          ref += prod;
          scale += std::fabs(prod);
        }
        if (c.bias) {
          ref += read(bias, j);
          scale += std::fabs(read(bias, j));
        }
        const double got = at(out, bi, i, j);
        const double tol = out_tol * std::fabs(ref) + acc_tol * scale;
        if (!(std::fabs(got - ref) <= tol) && ++failures <= 5) {
          ADD_FAILURE() << "out[" << bi << "][" << i << "][" << j << "] = " << got << ", expected "
                        << ref << " (tolerance " << tol << ")";
        }
      }
      for (int64_t j = c.n; j < ld; ++j) {  // the kernel must not write into row padding
        if (!std::isnan(read(out_storage, (bi * c.m + i) * ld + j)) && ++failures <= 5) {
          ADD_FAILURE() << "padding after out[" << bi << "][" << i << "] was written";
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// (m, k, n) triples: degenerate, odd, and large enough for the blocked multi-thread kernels.
const std::vector<std::array<int64_t, 3>> kShapes = {
    {1, 1, 1}, {1, 17, 3}, {3, 17, 65}, {17, 65, 3}, {65, 3, 17}, {17, 1, 65}, {130, 257, 129}};

TEST(MatmulKernel, F32TransposesAndBias) {
  for (const auto& [m, k, n] : kShapes)
    for (Layout la : {Layout::Row, Layout::Col})
      for (Layout lb : {Layout::Row, Layout::Col})
        for (bool bias : {false, true}) {
          Case c;
          c.m = m, c.k = k, c.n = n, c.la = la, c.lb = lb, c.bias = bias;
          check(c);
        }
}

TEST(MatmulKernel, F32PaddedAndPackedLayouts) {
  for (Layout la : {Layout::PaddedRow, Layout::Strided2, Layout::Col})
    for (Layout lb : {Layout::PaddedRow, Layout::Strided2, Layout::Row}) {
      Case c;
      c.m = 17, c.k = 65, c.n = 33, c.la = la, c.lb = lb, c.bias = true;
      check(c);
    }
}

// Leading dimensions of 1024 f32 / 2048 bf16 elements (4 KB) on operands of >= 64K elements:
// the kernel copies these into a padded layout first (cache-set aliasing). Each case pads a
// different operand: a row-major (lda = k), b column-major (ldb = k), a column-major
// (lda = m), b row-major (ldb = n); with bias.
TEST(MatmulKernel, FourKilobyteLeadingDimensionsArePadded) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    const int64_t ld = dtype == DType::F32 ? 1024 : 2048;
    const std::array<std::array<int64_t, 3>, 3> mkn = {{{70, ld, 72}, {ld, 70, 72}, {72, 70, ld}}};
    const std::array<std::pair<Layout, Layout>, 3> layouts = {
        {{Layout::Row, Layout::Col}, {Layout::Col, Layout::Row}, {Layout::Col, Layout::Row}}};
    for (size_t i = 0; i < mkn.size(); ++i) {
      Case c;
      c.in = c.out = dtype;
      c.m = mkn[i][0], c.k = mkn[i][1], c.n = mkn[i][2];
      c.la = layouts[i].first, c.lb = layouts[i].second, c.bias = true;
      c.bias_dtype = dtype;
      check(c);
    }
  }
}

// The chunked and split paths below run only with two or more OpenMP threads.
class TwoThreads {
 public:
  TwoThreads() : saved_(omp_get_max_threads()) { omp_set_num_threads(2); }
  ~TwoThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Products of at least 2048 rows into 128-256 columns run as chunks of 256 rows, one oneDNN
// call each (matmul.cpp): the rows below leave a short last chunk, and each case moves a
// different operand (padded or transposed a, transposed b, a strided output with padding).
TEST(MatmulKernel, ManyRowsIntoNarrowOutputs) {
  TwoThreads threads;
  const int64_t m = 8 * 256 + 131;
  for (int64_t n : {128, 200, 256}) {
    Case c;
    c.m = m, c.k = 65, c.n = n, c.bias = true;
    check(c);
    c.la = Layout::PaddedRow, c.lb = Layout::Col, c.out_pad = 3;
    check(c);
    c.la = Layout::Col, c.lb = Layout::Row, c.bias = false;
    check(c);
  }
  Case c;  // bf16 operands without a native kernel are widened, then cut like f32
  c.m = m, c.k = 33, c.n = 256, c.bias = true;
  c.in = DType::BF16;
  check(c);
}

// Products of at most 512 rows into at least 1024 columns (and >= 2^26 multiply-adds) run as
// chunks of 256 columns (matmul.cpp): a short last chunk, bias, transposed and padded b.
TEST(MatmulKernel, FewRowsIntoWideOutputs) {
  TwoThreads threads;
  Case c;
  c.m = 256, c.k = 260, c.n = 4 * 256 + 77, c.bias = true;
  check(c);
  c.lb = Layout::Col, c.out_pad = 3;
  check(c);
  c.la = Layout::Col, c.lb = Layout::PaddedRow, c.bias = false;
  check(c);
  c.la = Layout::Row, c.lb = Layout::Col, c.bias = true, c.in = DType::BF16;  // widened, then cut
  check(c);
}

// Products with K >= 8 x max(M, N) (and >= 2^26 multiply-adds) are split along K between the
// threads, each part into its own buffer, then summed (matmul.cpp): a transposed a (a weight
// gradient), a padded a, a transposed b, bias and a strided output. K is odd so the parts differ.
TEST(MatmulKernel, LongInnerDimension) {
  TwoThreads threads;
  Case c;
  c.m = 64, c.n = 130, c.k = 8191, c.la = Layout::Col, c.bias = true;
  check(c);
  c.la = Layout::PaddedRow, c.lb = Layout::Col, c.out_pad = 3;
  check(c);
}

TEST(MatmulKernel, F32Batched) {
  for (Layout la : {Layout::Row, Layout::Col, Layout::Interleaved})
    for (Layout lb : {Layout::Row, Layout::Col, Layout::Interleaved}) {
      Case c;
      c.batch = c.a_batch = c.b_batch = 3;
      c.m = 17, c.k = 33, c.n = 65, c.la = la, c.lb = lb, c.bias = la == Layout::Row;
      check(c);
    }
}

TEST(MatmulKernel, F32BatchBroadcast) {
  for (Layout l : {Layout::Row, Layout::Col}) {
    Case c;
    c.batch = 4, c.m = 17, c.k = 33, c.n = 65, c.la = l, c.lb = l;
    c.a_batch = 1, c.b_batch = 4;  // a broadcast by size 1
    check(c);
    c.a_batch = 4, c.b_batch = 1;  // b broadcast by size 1 (a Linear weight)
    check(c);
    c.a_batch = 4, c.b_stride0 = true;  // b broadcast by stride 0
    check(c);
    c.b_stride0 = false, c.b_batch = 4, c.a_stride0 = true;  // a broadcast by stride 0
    check(c);
    c.a_stride0 = false, c.a_batch = 1, c.b_batch = 1, c.bias = true;  // both: out repeats
    check(c);
  }
}

TEST(MatmulKernel, StridedOutputKeepsPadding) {
  Case c;
  c.batch = c.a_batch = c.b_batch = 2;
  c.m = 17, c.k = 9, c.n = 33, c.out_pad = 5, c.bias = true;
  check(c);
  c.in = c.out = DType::BF16;
  check(c);
}

TEST(MatmulKernel, Bf16ToBf16) {
  for (const auto& [m, k, n] : kShapes)
    for (Layout la : {Layout::Row, Layout::Col})
      for (Layout lb : {Layout::Row, Layout::Col}) {
        Case c;
        c.in = c.out = DType::BF16;
        c.m = m, c.k = k, c.n = n, c.la = la, c.lb = lb;
        c.bias = la == lb;
        c.bias_dtype = la == Layout::Row ? DType::BF16 : DType::F32;
        check(c);
      }
}

TEST(MatmulKernel, Bf16ToF32) {
  for (const auto& [m, k, n] : kShapes)
    for (Layout lb : {Layout::Row, Layout::Col, Layout::Strided2}) {
      Case c;
      c.in = DType::BF16, c.out = DType::F32;
      c.m = m, c.k = k, c.n = n, c.la = Layout::Col, c.lb = lb, c.bias = true;
      check(c);
    }
}

TEST(MatmulKernel, Bf16BatchedAndBroadcast) {
  Case c;
  c.in = c.out = DType::BF16;
  c.batch = c.a_batch = c.b_batch = 3;
  c.m = 17, c.k = 33, c.n = 65, c.la = Layout::Interleaved, c.lb = Layout::Col, c.bias = true;
  check(c);
  c.b_batch = 1;
  check(c);
  c.a_batch = 1, c.b_batch = 3, c.la = Layout::Row;
  check(c);
}

TEST(MatmulKernel, EmptyInnerDimGivesBias) {
  for (bool bias : {false, true})
    for (DType dt : {DType::F32, DType::BF16}) {
      Case c;
      c.in = c.out = dt;
      c.batch = c.a_batch = c.b_batch = 2, c.m = 3, c.k = 0, c.n = 5, c.bias = bias;
      c.bias_dtype = dt;
      check(c);
    }
}

TEST(MatmulKernel, EmptyOutputIsANoOp) {
  Tensor a = Tensor::empty({1, 0, 4}), b = Tensor::empty({1, 4, 3}), out = Tensor::empty({1, 0, 3});
  EXPECT_NO_THROW(cpu_backend().matmul(a, b, Tensor(), out));
}

TEST(MatmulKernel, RepeatedCallsWithFreshDataStayCorrect) {
  // The second and third calls hit the primitive cache with new data pointers.
  for (int rep = 0; rep < 3; ++rep) {
    Case c;
    c.m = 33, c.k = 17, c.n = 65, c.lb = Layout::Col, c.bias = true;
    check(c);
    c.in = c.out = DType::BF16;
    check(c);
  }
}

TEST(MatmulKernel, ConcurrentCallers) {
  // Threads share cached primitives (some geometries are new to all of them at once).
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int rep = 0; rep < 4; ++rep) {
        Case c;
        c.m = 19 + rep, c.k = 23, c.n = 29 + t % 2, c.bias = rep % 2 == 0;
        c.in = c.out = t < 2 ? DType::F32 : DType::BF16;
        check(c);
      }
    });
  }
  for (auto& th : threads) th.join();
}

// EXPECT_THROW plus a look at the message: it must name what was passed.
template <typename Fn>
void expect_error(Fn fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected loom::Error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(MatmulKernel, BadArgumentsThrow) {
  Backend& be = cpu_backend();
  const Tensor none;
  Tensor a = Tensor::empty({1, 3, 4}), b = Tensor::empty({1, 4, 2}), out = Tensor::empty({1, 3, 2});
  EXPECT_THROW(be.matmul(Tensor::empty({3, 4}), b, none, out), Error);
  expect_error([&] { be.matmul(Tensor::empty({3, 4}), b, none, out); }, "(3, 4)");
  expect_error([&] { be.matmul(a, Tensor::empty({1, 5, 2}), none, out); }, "(1, 5, 2)");
  expect_error([&] { be.matmul(a, b, none, Tensor::empty({1, 3, 3})); }, "(1, 3, 3)");
  expect_error(
      [&] {
        be.matmul(Tensor::empty({2, 3, 4}), b, none, Tensor::empty({3, 3, 2}));
      },
      "(2, 3, 4)");
  expect_error([&] { be.matmul(a, Tensor::empty({1, 4, 2}, DType::BF16), none, out); }, "bf16");
  expect_error([&] { be.matmul(a, b, none, Tensor::empty({1, 3, 2}, DType::BF16)); }, "bf16");
  expect_error(
      [&] {
        be.matmul(Tensor::empty({1, 3, 4}, DType::I32), Tensor::empty({1, 4, 2}, DType::I32), none,
                  Tensor::empty({1, 3, 2}, DType::I32));
      },
      "i32");
  expect_error([&] { be.matmul(a, b, Tensor::empty({3}), out); }, "(3)");
  expect_error([&] { be.matmul(a, b, Tensor::empty({2}, DType::BF16), out); }, "bias");
  // Two output matrices at the same address.
  Tensor overlapping = Tensor::empty({3, 2}).as_strided({2, 3, 2}, {0, 2, 1}, 0);
  expect_error([&] { be.matmul(Tensor::empty({2, 3, 4}), b, none, overlapping); }, "strides");
}

}  // namespace
}  // namespace loom
