// TensorBoard event files: the CRC-32C of TFRecord framing against the standard check value,
// and a file's records framed as TFRecord readers expect (lengths and masked CRCs that match).
// tests/e2e/tensorboard_test.sh reads a run's file back with TensorBoard's own reader.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "loom/train/tensorboard.h"
#include "temp_dir_test.h"

namespace loom::train {
namespace {

TEST(TensorBoard, Crc32cMatchesTheCheckValue) {
  // The check value of CRC-32C (RFC 3720, iSCSI): "123456789" -> 0xE3069283.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros -> 0x8A9136AA.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  return v;
}

uint32_t masked(const std::string& s, size_t at, size_t n) {
  const uint32_t c = crc32c(s.data() + at, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

class TensorBoardFile : public TempDirTest {};

TEST_F(TensorBoardFile, RecordsAreFramedWithMatchingCrcs) {
  std::string path;
  {
    TensorBoardWriter w(this->path("tb"));
    path = w.path();
    w.add_scalars(
        Json::object({{"loss", 1.5}, {"time_s", Json::object({{"step", 0.25}})}, {"note", "text"}}),
        3);
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    const uint64_t n = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), masked(bytes, at, 8)) << "length CRC of record " << records;
    ASSERT_LE(at + 12 + n + 4, bytes.size());
    EXPECT_EQ(le(bytes, at + 12 + n, 4), masked(bytes, at + 12, n))
        << "data CRC of record " << records;
    const std::string data = bytes.substr(at + 12, n);
    if (records == 0) EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
    if (records == 1) {
      EXPECT_NE(data.find("loss"), std::string::npos);
      EXPECT_NE(data.find("time_s/step"), std::string::npos);
      EXPECT_EQ(data.find("note"), std::string::npos) << "a string is not a scalar";
    }
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 2);
}

}  // namespace
}  // namespace loom::train
