// The CUDA backend through the same op harness as the CPU (op_cases.cpp: float64 references,
// finite differences, bf16 against f32), plus what only a device backend has: transfers in
// both directions with conversion and strides, the device allocator's accounting, and host
// tensors refused by the kernels. Linked against the real backend (gpu_main.cpp) or its host
// emulation (emulated_main.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "loom/backend/backend.h"
#include "loom/ops/ops.h"
#include "op_harness.h"

namespace {

using loom::DType;
using loom::Tensor;

const loom::Device kCuda{loom::DeviceType::CUDA, 0};

class CudaOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaOpTest, ForwardGradientAndBf16) {
  harness::check_op(GetParam(), kCuda);
}

std::vector<std::string> registered_ops() {
  harness::register_all_cases();
  std::vector<std::string> names;
  for (auto& [name, cases] : harness::registry()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOpTest, ::testing::ValuesIn(registered_ops()),
                         [](const auto& info) { return info.param; });

// Every float format's conversion on the device equals the CPU's, bit for bit, over a spread
// of f32 values (normals of every exponent, subnormals, specials, halfway cases).
TEST(CudaCopy, ConversionsMatchTheCpuBitForBit) {
  std::vector<float> values;
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) values.push_back(loom::f32_from_bits(bits(rng)));
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, 464.0f, 57344.0f, 65504.0f,
                  65520.0f, 1e-8f, 3.0e-5f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256})
    values.push_back(v);
  const Tensor host = loom::from_vector(values, {int64_t(values.size())});
  for (DType to : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}) {
    Tensor cpu = Tensor::empty(host.shape(), to);
    loom::cpu_backend().copy(host, cpu);
    Tensor dev_in = Tensor::empty(host.shape(), DType::F32, kCuda);
    loom::backend_for(kCuda).copy(host, dev_in);
    Tensor dev = Tensor::empty(host.shape(), to, kCuda);
    loom::backend_for(kCuda).copy(dev_in, dev);  // converted on the device
    Tensor back = Tensor::empty(host.shape(), to);
    loom::backend_for(kCuda).copy(dev, back);
    const size_t n = values.size() * loom::dtype_size(to);
    EXPECT_EQ(0, std::memcmp(cpu.data_ptr(), back.data_ptr(), n)) << loom::dtype_name(to);
    // ... and back to f32 on the device.
    Tensor widened = Tensor::empty(host.shape(), DType::F32, kCuda);
    loom::backend_for(kCuda).copy(dev, widened);
    std::vector<float> w = loom::to_vector(widened);
    Tensor cpu_w = Tensor::empty(host.shape(), DType::F32);
    loom::cpu_backend().copy(cpu, cpu_w);
    EXPECT_EQ(0, std::memcmp(cpu_w.data_ptr(), w.data(), values.size() * 4))
        << loom::dtype_name(to);
  }
}

// Strided views in both directions and on the device, with dtype changes.
TEST(CudaCopy, StridedTransfers) {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) - 7.5f;
  const Tensor host = loom::from_vector(v, {2, 3, 4});
  const Tensor dev = loom::from_vector(v, {2, 3, 4}, DType::F32, kCuda);
  const Tensor t_host = loom::contiguous(loom::transpose(host, 0, 2));  // (4, 3, 2)
  // device (strided view) -> host, to bf16
  Tensor out = Tensor::empty({4, 3, 2}, DType::BF16);
  loom::backend_for(kCuda).copy(loom::transpose(dev, 0, 2), out);
  const std::vector<float> got = loom::to_vector(out), want = loom::to_vector(t_host);
  EXPECT_EQ(got, want);
  // host (strided view) -> device i64 -> host
  Tensor di = Tensor::empty({4, 3, 2}, DType::I64, kCuda);
  loom::backend_for(kCuda).copy(loom::transpose(host, 0, 2), di);
  const std::vector<int64_t> gi = loom::to_vector_i64(di);
  for (size_t i = 0; i < gi.size(); ++i) EXPECT_EQ(gi[i], int64_t(want[i])) << i;
}

// Transfers go through two pinned 8 MiB buffers in turns (copy.cu): a 21 MB tensor crosses
// both several times, and a run of host-to-device copies, each returning before its transfer
// finished, reuses them while the host's sources are overwritten and freed.
TEST(CudaCopy, TransfersThroughThePinnedBuffers) {
  const int64_t n = 5'300'001;  // not a multiple of a chunk
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 100003) * 0.25f - float(i % 7);
  const Tensor dev = loom::to_device(loom::from_vector(v, {n}), kCuda);
  EXPECT_EQ(loom::to_vector(dev), v);
  std::vector<Tensor> devs;
  std::vector<float> chunk(3'000'000);
  for (int r = 0; r < 6; ++r) {
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = float(r * 1000 + int(i % 997));
    devs.push_back(loom::to_device(loom::from_vector(chunk, {int64_t(chunk.size())}), kCuda));
  }
  for (int r = 0; r < 6; ++r) {
    const std::vector<float> got = loom::to_vector(devs[size_t(r)]);
    ASSERT_EQ(got.size(), chunk.size());
    for (size_t i = 0; i < got.size(); i += 4999)
      ASSERT_EQ(got[i], float(r * 1000 + int(i % 997))) << r << " " << i;
  }
}

// allow_tf32 (train.tf32): f32 GEMMs round their operands to TF32's 10 mantissa bits. Operands
// 1 + j 2^-16 lose their fraction there, so the product moves away from the float64 one by far
// more than f32's rounding, and by no more than TF32's; with it off, the GEMM is f32 again.
TEST(CudaMatmul, Tf32WhenAllowedOnly) {
  const int64_t m = 16, k = 64, n = 8;
  std::vector<float> a(size_t(m * k)), b(size_t(k * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1.0f + float(i % 13) * 0x1p-16f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f + float(i % 11) * 0x1p-16f;
  std::vector<double> want(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        want[size_t(i * n + j)] += double(a[size_t(i * k + p)]) * double(b[size_t(p * n + j)]);
  const Tensor da = loom::from_vector(a, {m, k}, DType::F32, kCuda);
  const Tensor db = loom::from_vector(b, {k, n}, DType::F32, kCuda);
  auto worst = [&] {
    const std::vector<float> got = loom::to_vector(loom::matmul(da, db));
    double e = 0;
    for (size_t i = 0; i < got.size(); ++i)
      e = std::max(e, std::fabs(double(got[i]) - want[i]) / want[i]);
    return e;
  };
  const double f32 = worst();
  loom::set_allow_tf32(true);
  const double tf32 = worst();
  loom::set_allow_tf32(false);
  EXPECT_LT(f32, 1e-6);
  EXPECT_GT(tf32, 1e-5);
  EXPECT_LT(tf32, 2e-3);
  EXPECT_LT(worst(), 1e-6);
}

TEST(CudaAllocator, CountsDeviceBytesByCategory) {
  auto& a = loom::allocator_for(loom::DeviceType::CUDA);
  const loom::MemStats before = a.stats();
  {
    Tensor t = Tensor::empty({1000}, DType::F32, kCuda, loom::MemCategory::OptimizerState);
    const loom::MemStats during = a.stats();
    EXPECT_EQ(during.live[int(loom::MemCategory::OptimizerState)] -
                  before.live[int(loom::MemCategory::OptimizerState)],
              4000);
  }
  EXPECT_EQ(a.stats().live_total, before.live_total);
  // The freed block is cached: the same request again asks the system for nothing.
  const int64_t system_allocs = a.stats().system_allocs;
  Tensor again = Tensor::empty({1000}, DType::F32, kCuda, loom::MemCategory::OptimizerState);
  EXPECT_EQ(a.stats().system_allocs, system_allocs);
  EXPECT_GE(a.stats().reserved, 4000);
}

// gelu_bias_backward in autocast's form (f32 pre and gout, bf16 gpre) against float64: gpre
// within one bf16 rounding (2^-8 relative) plus the f32 math's 1e-5 of max |gpre|, and the
// bias gradient as the sum of the unrounded f32 values (within 1e-5 of the column's sum of
// |terms|), which the sum of the bf16 values misses (checked).
TEST(CudaKernels, GeluBiasBackwardWithBf16GradientSumsTheF32Values) {
  const int64_t rows = 1100, n = 40;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> pre(size_t(rows * n)), gout(size_t(rows * n));
  for (float& v : pre) v = 4.0f * uniform(rng);
  for (float& v : gout) v = uniform(rng);
  const Tensor dpre = loom::from_vector(pre, {rows, n}, DType::F32, kCuda);
  const Tensor dgout = loom::from_vector(gout, {rows, n}, DType::F32, kCuda);
  Tensor gpre = Tensor::empty({rows, n}, DType::BF16, kCuda);
  Tensor gbias = Tensor::empty({n}, DType::F32, kCuda);
  loom::backend_for(kCuda).gelu_bias_backward(dpre, dgout, gpre, gbias);
  const std::vector<float> got = loom::to_vector(gpre), bias = loom::to_vector(gbias);
  auto gelu_grad = [](double x) {
    const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  };
  std::vector<double> ref(pre.size());
  double max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = double(gout[i]) * gelu_grad(pre[i]);
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], std::ldexp(std::fabs(ref[i]), -8) + 1e-5 * max_ref) << i;
  double worst_bf16 = 0;
  for (int64_t c = 0; c < n; ++c) {
    double sum = 0, mag = 0, bf16_sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += ref[size_t(r * n + c)];
      mag += std::fabs(ref[size_t(r * n + c)]);
      bf16_sum += got[size_t(r * n + c)];
    }
    EXPECT_NEAR(bias[size_t(c)], sum, 1e-5 * mag) << "column " << c;
    worst_bf16 = std::max(worst_bf16, std::fabs(bf16_sum - sum) / (1e-5 * mag));
  }
  EXPECT_GT(worst_bf16, 2.0);
}

// sums (n) against float64 column sums of x (rows, n), within one f32 rounding.
void expect_column_sums(const Tensor& sums, const std::vector<float>& x, int64_t rows, int64_t n) {
  const std::vector<float> got = loom::to_vector(sums);
  for (int64_t c = 0; c < n; ++c) {
    double sum = 0, mag = 0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += x[size_t(r * n + c)];
      mag += std::fabs(x[size_t(r * n + c)]);
    }
    EXPECT_NEAR(got[size_t(c)], sum, std::ldexp(mag, -23)) << "column " << c;
  }
}

// cast_with_column_sums on the device: the bf16 copy bit for bit the CPU's rounding, the sums
// of the f32 values within one f32 rounding of float64.
TEST(CudaKernels, CastWithColumnSumsRoundsAndSumsTheF32Values) {
  const int64_t rows = 1100, n = 40;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(size_t(rows * n));
  for (float& v : x) v = uniform(rng);
  const Tensor host = loom::from_vector(x, {rows, n});
  Tensor low = Tensor::empty({rows, n}, DType::BF16, kCuda),
         sums = Tensor::empty({n}, DType::F32, kCuda);
  loom::backend_for(kCuda).cast_with_column_sums(loom::to_device(host, kCuda), low, sums);
  Tensor cpu_low = Tensor::empty({rows, n}, DType::BF16);
  loom::cpu_backend().copy(host, cpu_low);
  const Tensor back = loom::to_device(low, loom::cpu_device());
  EXPECT_EQ(0, std::memcmp(back.data_ptr(), cpu_low.data_ptr(), size_t(rows * n) * 2));
  expect_column_sums(sums, x, rows, n);
}

// A bf16 gradient's column sums alone, on the device: within one f32 rounding of float64.
TEST(CudaKernels, CastWithColumnSumsSumsABf16GradientAlone) {
  const int64_t rows = 1100, n = 40;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(size_t(rows * n));
  for (float& v : x) v = loom::to_f32(loom::to_bf16(uniform(rng)));  // exact in bf16
  const Tensor low = loom::from_vector(x, {rows, n}, DType::BF16, kCuda);
  Tensor sums = Tensor::empty({n}, DType::F32, kCuda);
  loom::backend_for(kCuda).cast_with_column_sums(low, Tensor(), sums);
  expect_column_sums(sums, x, rows, n);
}

// Mamba-2's scan kernels (ssm_scan_forward / backward) on the device against the CPU's, which
// ssm_test.cpp checks against the float64 recurrence: outputs, final state and every input's
// gradient within 1e-5 of each tensor's largest, with grouped B/C, an initial state, a loss on
// the final state and checkpoints every 5 of 23 steps (a short last chunk). 32 rows of P (more
// than a warp's lanes work on one row set on a GPU; the emulation runs them in one thread).
TEST(CudaKernels, SsmScanEqualsTheCpuKernel) {
  const int64_t B = 2, T = 23, H = 4, P = 40, G = 2, N = 6;
  auto draw = [](const loom::Shape& shape, const char* what, float lo, float hi) {
    Tensor t = Tensor::empty(shape);
    loom::fill_uniform(t, loom::RngKey{21, "ssm_scan", what}, 0, lo, hi);
    return t;
  };
  const std::vector<Tensor> inputs = {
      draw({B, T, H, P}, "x", -1, 1), draw({B, T, H}, "dt", 0.01f, 0.5f),
      draw({H}, "A", -3, -0.5f),      draw({B, T, G, N}, "B", -1, 1),
      draw({B, T, G, N}, "C", -1, 1), draw({B, H, P, N}, "h0", -1, 1)};
  const Tensor wy = draw({B, T, H, P}, "wy", -1, 1), ws = draw({B, H, P, N}, "ws", -1, 1);
  auto run = [&](loom::Device device) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : inputs) {
      Tensor leaf = loom::to_device(t, device).detach();
      leaf.set_requires_grad(true);
      leaves.push_back(leaf);
    }
    const loom::SsmScanResult r =
        loom::ssm_scan(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], 5, leaves[5]);
    loom::backward(loom::add(loom::sum(loom::mul(r.y, loom::to_device(wy, device))),
                             loom::sum(loom::mul(r.final_state, loom::to_device(ws, device)))));
    std::vector<Tensor> out = {r.y.detach(), r.final_state.detach()};
    for (const Tensor& l : leaves) out.push_back(l.grad());
    return out;
  };
  const std::vector<Tensor> cpu = run(loom::cpu_device()), dev = run(kCuda);
  const char* names[] = {"y", "final_state", "dx", "ddt", "dA", "dB", "dC", "dh0"};
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::vector<float> want = loom::to_vector(cpu[i]),
                             got = loom::to_vector(loom::to_device(dev[i], loom::cpu_device()));
    ASSERT_EQ(got.size(), want.size()) << names[i];
    float scale = 0, worst = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      scale = std::max(scale, std::abs(want[k]));
      worst = std::max(worst, std::abs(got[k] - want[k]));
    }
    EXPECT_LE(worst, 1e-5f * scale) << names[i] << ": scale " << scale;
  }
}

TEST(CudaKernels, RefuseHostTensors) {
  const Tensor host = loom::from_vector(std::vector<float>{1, 2, 3}, {3});
  const Tensor dev = loom::from_vector(std::vector<float>{1, 2, 3}, {3}, DType::F32, kCuda);
  Tensor out = Tensor::empty({3}, DType::F32, kCuda);
  EXPECT_THROW(loom::backend_for(kCuda).binary(loom::BinaryOp::Add, host, dev, out), loom::Error);
}

}  // namespace
