// .npy files: exact round trips for f32 and i64, the header byte for byte as the NumPy format
// specification describes it, and clear errors for files we cannot read.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "temp_dir_test.h"

#include "loom/data/npy.h"
#include "loom/ops/creation.h"

namespace {

namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class DataNpy : public TempDirTest {};

TEST_F(DataNpy, RoundTripsF32AndI64) {
  const loom::Tensor f = loom::randn({2, 3, 4}, loom::RngKey{1, "test", "npy"});
  loom::write_npy(path("f.npy"), f);
  const loom::Tensor f2 = loom::read_npy(path("f.npy"));
  EXPECT_EQ(f2.shape(), f.shape());
  EXPECT_EQ(f2.dtype(), loom::DType::F32);
  EXPECT_EQ(loom::to_vector(f2), loom::to_vector(f));

  const std::vector<int64_t> ints = {0, -1, int64_t(1) << 40, -(int64_t(1) << 62), 7};
  loom::write_npy(path("i.npy"), loom::from_vector(ints, {5}));
  const loom::Tensor i2 = loom::read_npy(path("i.npy"));
  EXPECT_EQ(i2.shape(), (loom::Shape{5}));
  EXPECT_EQ(i2.dtype(), loom::DType::I64);
  EXPECT_EQ(loom::to_vector_i64(i2), ints);

  // Scalars and empty arrays.
  loom::write_npy(path("s.npy"), loom::full({}, 2.5));
  EXPECT_EQ(loom::read_npy(path("s.npy")).shape(), loom::Shape{});
  EXPECT_EQ(loom::item(loom::read_npy(path("s.npy"))), 2.5f);
  loom::write_npy(path("e.npy"), loom::zeros({0, 3}));
  EXPECT_EQ(loom::read_npy(path("e.npy")).shape(), (loom::Shape{0, 3}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 4)
      << "a temporary file was left behind";
}

TEST_F(DataNpy, RoundTripsU8WithNumPysByteDescr) {
  loom::Tensor u = loom::Tensor::empty({2, 3, 5}, loom::DType::U8);
  for (int64_t i = 0; i < u.numel(); ++i) static_cast<uint8_t*>(u.data_ptr())[i] = uint8_t(i * 9);
  loom::write_npy(path("u.npy"), u);
  const std::string bytes = read_bytes(path("u.npy"));
  const std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 5), }";
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);  // NumPy's uint8: byte order not applicable
  EXPECT_EQ(bytes.size(), 128u + 30u);             // 10 + 62-byte dict + '\n' > 64: a second block
  const loom::Tensor u2 = loom::read_npy(path("u.npy"));
  EXPECT_EQ(u2.dtype(), loom::DType::U8);
  EXPECT_EQ(u2.shape(), u.shape());
  EXPECT_EQ(std::memcmp(u2.data_ptr(), u.data_ptr(), 30), 0);
}

TEST_F(DataNpy, WritesStridedViewsInLogicalOrder) {
  const loom::Tensor t = loom::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  const loom::Tensor transposed = t.as_strided({3, 2}, {1, 3}, 0);  // (3, 2) view
  loom::write_npy(path("t.npy"), transposed);
  EXPECT_EQ(loom::to_vector(loom::read_npy(path("t.npy"))), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST_F(DataNpy, HeaderMatchesTheFormatSpec) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f, 4.0f, 5.0f};
  loom::write_npy(path("h.npy"), loom::from_vector(values, {2, 3}));
  const std::string bytes = read_bytes(path("h.npy"));
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(bytes[6], '\x01');  // major version
  EXPECT_EQ(bytes[7], '\x00');  // minor version
  const size_t header_len = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u) << "data must start 64-byte aligned";
  ASSERT_EQ(bytes.size(), 10 + header_len + values.size() * 4);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.substr(0, dict.size()), dict);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header.find_first_not_of(' ', dict.size()), header_len - 1) << "pad with spaces";
  EXPECT_EQ(std::memcmp(bytes.data() + 10 + header_len, values.data(), values.size() * 4), 0);

  loom::write_npy(path("v.npy"), loom::from_vector(std::vector<int64_t>{1, 2, 3}, {3}));
  const std::string v = read_bytes(path("v.npy"));
  const std::string dict1 = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(v.substr(10, dict1.size()), dict1);
  EXPECT_EQ(v.size(), 128u + 24u);  // 10 + 57-byte dict + '\n' spills into a second block
}

TEST_F(DataNpy, ClearErrors) {
  auto expect_error = [&](const std::string& name, const std::string& content,
                          const std::string& detail) {
    if (!content.empty()) std::ofstream(path(name), std::ios::binary) << content;
    try {
      loom::read_npy(path(name));
      ADD_FAILURE() << name << ": no error";
    } catch (const loom::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path(name)), std::string::npos) << msg;
      EXPECT_NE(msg.find(detail), std::string::npos) << msg;
    }
  };
  auto npy = [](const std::string& dict, size_t data_bytes) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::string out = std::string("\x93NUMPY\x01\x00", 8);
    out += char(header.size() & 0xff);
    out += char(header.size() >> 8);
    return out + header + std::string(data_bytes, '\0');
  };
  expect_error("absent.npy", "", "does not exist");
  expect_error("magic.npy", "PK\x03\x04 not numpy at all", "magic");
  expect_error("f8.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16),
               "'<f8'");
  expect_error("fortran.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8),
               "Fortran");
  expect_error("short.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 12),
               "needs 16 bytes of data, file has 12");
  EXPECT_EQ(loom::read_npy([&] {
              std::ofstream(path("ok.npy"), std::ios::binary)
                  << npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }", 16);
              return path("ok.npy");
            }())
                .shape(),
            (loom::Shape{1, 2}));
  EXPECT_THROW(loom::write_npy(path("bf.npy"), loom::zeros({2}, loom::DType::BF16)), loom::Error);
  EXPECT_FALSE(fs::exists(path("bf.npy")));
}

}  // namespace
