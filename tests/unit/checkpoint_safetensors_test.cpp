// safetensors: bit-exact round trips of every dtype, a file built byte by byte (the format as
// the spec states it, independent of Loom's writer), strict rejection of corrupt files, and
// atomic writes that never clobber the previous file.
#include <gtest/gtest.h>

#include "expect_error.h"

#include <unistd.h>
#include "temp_dir_test.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "loom/checkpoint/safetensors.h"
#include "loom/ops/ops.h"

namespace {

namespace fs = std::filesystem;
using loom::DType;
using loom::Tensor;

// A fresh directory per test, removed afterwards.
class CheckpointSafetensors : public TempDirTest {
 protected:
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string raw_bytes(const Tensor& t) {
  const Tensor c = loom::contiguous(t);
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

std::string u64_le(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((v >> (8 * i)) & 0xff);
  return out;
}

// A file per the spec: length, header, buffer.
std::string safetensors_bytes(const std::string& header, const std::string& buffer) {
  return u64_le(header.size()) + header + buffer;
}

TEST_F(CheckpointSafetensors, EveryDtypeRoundTripsBitExactly) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  const DType dtypes[] = {DType::F32,    DType::BF16, DType::F16, DType::F8E4M3,
                          DType::F8E5M2, DType::I32,  DType::I64, DType::U8};
  for (DType d : dtypes) {
    // Raw byte patterns cover every bit, including NaN and subnormal encodings.
    Tensor t = Tensor::empty({3, 5}, d);
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 37 + 11 + int(d));
    tensors.emplace_back(std::string("w.") + loom::dtype_name(d), t);
  }
  tensors.emplace_back(
      "values.bf16",
      loom::from_vector(std::vector<float>{1.0f, -2.5f, 3.1f, 1e-3f}, {2, 2}, DType::BF16));
  tensors.emplace_back(
      "scalar", loom::from_vector(std::vector<int64_t>{-(int64_t(1) << 62) - 1}, {}, DType::I64));
  tensors.emplace_back("empty", loom::zeros({0, 4}, DType::F16));
  // A non-contiguous view is written in its logical row-major order.
  Tensor base = loom::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  tensors.emplace_back("transposed", loom::permute(base, {1, 0}));

  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "1200"}};
  loom::save_safetensors(path("all.safetensors"), tensors, metadata);
  EXPECT_EQ(listing(), std::vector<std::string>{"all.safetensors"});  // no temp file left

  const loom::SafetensorsFile file = loom::load_safetensors(path("all.safetensors"));
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, loaded] = file.tensors[i];
    EXPECT_EQ(name, tensors[i].first);  // file order is save order
    EXPECT_EQ(loaded.dtype(), tensors[i].second.dtype()) << name;
    EXPECT_EQ(loaded.shape(), tensors[i].second.shape()) << name;
    EXPECT_TRUE(loaded.is_contiguous());
    EXPECT_EQ(raw_bytes(loaded), raw_bytes(tensors[i].second)) << name;
  }
  EXPECT_EQ(loom::to_vector(file.get("transposed")), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(file.get("values.bf16").data<loom::bf16>()[1].bits, loom::to_bf16(-2.5f).bits);
  EXPECT_EQ(loom::to_vector_i64(file.get("scalar"))[0], -(int64_t(1) << 62) - 1);
  EXPECT_TRUE(file.contains("empty"));
  EXPECT_EQ(file.by_name().size(), tensors.size());
  expect_error([&] { file.get("w.f64"); }, {"all.safetensors", "no tensor 'w.f64'", "'w.f32'"});
}

TEST_F(CheckpointSafetensors, WritesTheSpecifiedBytes) {
  loom::save_safetensors(
      path("x.safetensors"),
      {{"x", loom::from_vector(std::vector<float>{1.0f, -2.0f}, {2}, DType::BF16)}});
  const std::string bytes = read_bytes(path("x.safetensors"));
  const std::string json = R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  const size_t padded = (json.size() + 7) / 8 * 8;  // header padded with spaces to 8 bytes
  const std::string expected = u64_le(padded) + json + std::string(padded - json.size(), ' ') +
                               std::string("\x80\x3f\x00\xc0", 4);  // bf16 1.0, -2.0 (LE)
  EXPECT_EQ(bytes, expected);
}

TEST_F(CheckpointSafetensors, LoadsAFileBuiltByHand) {
  // Unpadded header, metadata in the middle, tensors stored in the opposite order of the
  // header: all allowed by the format.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("__metadata__":{"format":"pt"},)"
                             R"("b":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  float a[2] = {1.5f, -2.0f};
  int64_t b = -3;
  std::string buffer(reinterpret_cast<const char*>(&b), 8);
  buffer.append(reinterpret_cast<const char*>(a), 8);
  write_bytes(path("hand.safetensors"), safetensors_bytes(header, buffer));

  const loom::SafetensorsFile file = loom::load_safetensors(path("hand.safetensors"));
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].first, "a");
  EXPECT_EQ(loom::to_vector(file.get("a")), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(file.get("b").shape(), loom::Shape{});
  EXPECT_EQ(loom::to_vector_i64(file.get("b")), (std::vector<int64_t>{-3}));
  EXPECT_EQ(file.metadata.at("format"), "pt");
}

TEST_F(CheckpointSafetensors, CorruptFilesThrowNamingTheFile) {
  const std::string good_path = path("good.safetensors");
  loom::save_safetensors(
      good_path, {{"a", loom::arange(4, DType::I32)}, {"b", loom::ones({2, 2}, DType::F32)}});
  const std::string good = read_bytes(good_path);
  const size_t data_start = good.size() - 32;  // 8 + header; then 16 + 16 data bytes
  ASSERT_EQ(data_start % 8, 0u);
  int n = 0;
  // Writes `bytes` to a fresh file and expects loading it to fail mentioning `parts`.
  const auto expect_corrupt = [&](const std::string& bytes, std::vector<std::string> parts) {
    const std::string p = path("bad" + std::to_string(n++) + ".safetensors");
    write_bytes(p, bytes);
    parts.insert(parts.begin(), p);
    expect_error([&] { loom::load_safetensors(p); }, parts);
  };

  for (size_t cut : {size_t(0), size_t(5), size_t(8), size_t(20), data_start, data_start + 20,
                     good.size() - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(cut));
    expect_corrupt(good.substr(0, cut), {});
  }
  expect_corrupt(good.substr(0, 5), {"5 bytes", "too short"});
  expect_corrupt(good.substr(0, 40), {"header length", "larger than"});
  expect_corrupt(good.substr(0, good.size() - 1), {"outside the 31-byte data buffer"});

  std::string flipped = good;
  flipped[7] = char(0x80);  // header length's top byte
  expect_corrupt(flipped, {"header length", "larger than"});
  std::string shorter = good;
  shorter.replace(0, 8, u64_le(data_start - 8 - 8));  // header 8 bytes too short: JSON cut off
  expect_corrupt(shorter, {"header, line 1"});
  std::string bad_json = good;
  bad_json[8 + 5] = '#';
  expect_corrupt(bad_json, {"header, line 1, column 6"});
  expect_corrupt(good + "junk", {"4 trailing bytes"});

  const auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                        int b, int e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  const std::string data16(16, '\0');
  expect_corrupt(safetensors_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "," +
                                       entry("b", "F32", "[2]", 4, 12) + "}",
                                   std::string(12, '\0')),
                 {"tensor 'b' [4, 12) overlaps tensor 'a' [0, 8)"});
  expect_corrupt(safetensors_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "," +
                                       entry("b", "F32", "[1]", 12, 16) + "}",
                                   data16),
                 {"bytes [8, 12) of the data buffer belong to no tensor"});
  expect_corrupt(safetensors_bytes("{" + entry("a", "F32", "[4]", 8, 24) + "}", data16),
                 {"tensor 'a'", "outside the 16-byte data buffer"});
  expect_corrupt(safetensors_bytes("{" + entry("a", "F64", "[2]", 0, 16) + "}", data16),
                 {"tensor 'a'", "unsupported dtype 'F64'", "BF16"});
  expect_corrupt(safetensors_bytes("{" + entry("a", "F32", "[3]", 0, 16) + "}", data16),
                 {"tensor 'a'", "span 16 bytes", "need 12"});
  expect_corrupt(safetensors_bytes("{" + entry("a", "F32", "[-4]", 0, 16) + "}", data16),
                 {"tensor 'a'", "non-negative"});
  expect_corrupt(safetensors_bytes("{" + entry("a", "F32", "[4]", 16, 0) + "}", data16),
                 {"tensor 'a'", "0 <= begin <= end"});
  expect_corrupt(safetensors_bytes(R"({"a":[1,2]})", data16), {"tensor 'a' is an array"});
  expect_corrupt(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16],)"
                                   R"("extra":1}})",
                                   data16),
                 {"unknown key 'extra'"});
  expect_corrupt(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[16]}})", data16),
                 {"tensor 'a' has no 'data_offsets'"});
  expect_corrupt(safetensors_bytes(R"({"__metadata__":{"step":3}})", ""),
                 {"__metadata__ key 'step' is an integer"});
  expect_corrupt(safetensors_bytes(R"([])", ""), {"header is an array"});
  expect_corrupt(
      safetensors_bytes(
          "{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("a", "U8", "[8]", 8, 16) + "}", data16),
      {"header, line 1", "duplicate"});
  expect_error([&] { loom::load_safetensors(path("missing.safetensors")); },
               {"missing.safetensors", "No such file"});
}

TEST_F(CheckpointSafetensors, FailedSaveLeavesTheOldFileAndNoTempFile) {
  const std::string p = path("model.safetensors");
  loom::save_safetensors(p, {{"w", loom::ones({4})}});
  const std::string before = read_bytes(p);

  expect_error(
      [&] {
        loom::save_safetensors(p, {{"w", loom::zeros({2})}, {"w", loom::zeros({2})}});
      },
      {"model.safetensors", "'w' appears twice"});
  expect_error(
      [&] {
        loom::save_safetensors(p, {{"w", loom::zeros({2})}, {"u", Tensor()}});
      },
      {"model.safetensors", "'u' is undefined"});
  expect_error(
      [&] {
        loom::save_safetensors(p, {{"__metadata__", loom::zeros({2})}});
      },
      {"reserved"});
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});

  expect_error(
      [&] {
        loom::save_safetensors(path("no/such/dir/m.safetensors"), {{"w", loom::ones({1})}});
      },
      {"no/such/dir", "does not exist"});

  // Overwriting succeeds atomically and replaces the contents.
  loom::save_safetensors(p, {{"w", loom::zeros({4})}});
  EXPECT_EQ(loom::to_vector(loom::load_safetensors(p).get("w")), std::vector<float>(4, 0.0f));
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

}  // namespace
