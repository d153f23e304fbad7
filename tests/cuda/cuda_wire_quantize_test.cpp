// DiLoCo's int8 / int4 wire blocks on the device (Backend::wire_encode, wire_decode): the bytes
// are the host encoder's (lowcomm::encode, the pointer form the lowcomm tests check against
// their bounds) byte for byte, for f32 and bf16 scales, a trailing partial block, an odd block
// of int4 and a zero block; decoding gives the host decoder's values bit for bit. On the CPU
// twin too.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "device_tensors.h"
#include "loom/backend/backend.h"
#include "loom/lowcomm/quantize.h"
#include "loom/ops/ops.h"

namespace {

using loom::DType;
using loom::Tensor;
namespace lowcomm = loom::lowcomm;

using loom::test::kCuda;
using loom::test::on;
using loom::test::to_host;

TEST(CudaWireQuantize, CodesAreTheHostsByteForByte) {
  const int64_t n = 1000;  // 7 blocks of 128 and one of 104; 1000 / 37: an odd partial block
  std::mt19937 rng{7};
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng) * 1e-3f;
  for (int64_t i = 128; i < 256; ++i) x[size_t(i)] = 0.0f;  // a zero block
  for (const lowcomm::Compression kind : {lowcomm::Compression::Int8, lowcomm::Compression::Int4})
    for (const DType scale : {DType::F32, DType::BF16})
      for (const int64_t block : {int64_t(128), int64_t(37)}) {
        const lowcomm::QuantConfig q{kind, block, scale};
        SCOPED_TRACE(std::string(lowcomm::name_of(kind)) + " " + loom::dtype_name(scale) +
                     " scales, blocks of " + std::to_string(block));
        const int64_t bytes = lowcomm::encoded_bytes(q, n);
        std::vector<uint8_t> expected(static_cast<size_t>(bytes));
        lowcomm::encode(q, x.data(), n, expected.data());
        std::vector<float> values(static_cast<size_t>(n));
        lowcomm::decode(q, expected.data(), n, values.data());
        for (loom::Device device : {loom::cpu_device(), kCuda}) {
          SCOPED_TRACE(device.str());
          const Tensor codes = Tensor::empty({bytes}, DType::U8, device);
          lowcomm::encode(q, on(loom::from_vector(x, {n}), device), codes);
          const Tensor got = to_host(codes);
          EXPECT_EQ(std::memcmp(got.raw_ptr(), expected.data(), size_t(bytes)), 0);
          const Tensor back = Tensor::empty({n}, DType::F32, device);
          lowcomm::decode(q, codes, back);
          const std::vector<float> decoded = loom::to_vector(to_host(back));
          EXPECT_EQ(std::memcmp(decoded.data(), values.data(), size_t(n) * 4), 0);
        }
      }
}

}  // namespace
