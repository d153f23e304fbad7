// Sharded checkpoints: pieces written by several "ranks" read back under any element range,
// and every way a manifest can disagree with its files is a clear error naming what is wrong.
#include <gtest/gtest.h>

#include "expect_error.h"

#include <filesystem>
#include <fstream>
#include <functional>

#include "loom/checkpoint/sharded.h"
#include "loom/core/json_file.h"
#include "loom/ops/ops.h"
#include "temp_dir_test.h"

namespace {

namespace fs = std::filesystem;
using loom::Tensor;

std::vector<float> iota(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * float(i) + 0.25f;
  return v;
}

class CheckpointSharded : public TempDirTest {
 protected:
  // "model/w" (10 x 7 f32) in four uneven pieces over ranks 0-2, "model/b" (5 f32) whole on
  // rank 3, plus trainer_state.json.
  void write_four_ranks() {
    const std::vector<float> w = iota(70, 0.5f), b = iota(5, -1.0f);
    auto piece = [&](int64_t lo, int64_t hi) {
      return loom::TensorPiece{
          "model/w",
          {10, 7},
          lo,
          hi,
          loom::from_vector(std::vector<float>(w.begin() + lo, w.begin() + hi), {hi - lo})};
    };
    loom::write_rank_shard(dir_.string(), 0, {piece(0, 23)});
    loom::write_rank_shard(dir_.string(), 1, {piece(23, 24), piece(24, 50)});
    loom::write_rank_shard(dir_.string(), 2, {piece(50, 70)});
    loom::write_rank_shard(dir_.string(), 3, {{"model/b", {5}, 0, 5, loom::from_vector(b, {5})}});
    loom::write_manifest(dir_.string(), 4, {{"trainer_state.json", "{\"step\": 3}\n"}});
  }
  // Edits the manifest; rehash: also update manifest.xxh64, so the checks behind it run.
  void edit_manifest(const std::function<void(loom::Json&)>& edit, bool rehash = true) {
    loom::Json m = loom::read_json_file(path("manifest.json"));
    edit(m);
    loom::write_json_file(path("manifest.json"), m);
    if (!rehash) return;
    std::ifstream in(path("manifest.json"), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path("manifest.xxh64")) << loom::xxh64_hex(text.data(), text.size()) << "\n";
  }
};

TEST(Xxh64, PublishedVectorOfTheEmptyInput) {
  EXPECT_EQ(loom::xxh64_hex("", 0), "ef46db3751d8e999");  // the xxHash specification's value
}

TEST_F(CheckpointSharded, AnyRangeReadsBackAcrossPieces) {
  write_four_ranks();
  EXPECT_FALSE(fs::exists(path("rank-00000.json")));  // the indexes merge into the manifest
  loom::CheckpointReader r(dir_.string());
  EXPECT_EQ(r.names("model/"), (std::vector<std::string>{"model/b", "model/w"}));
  EXPECT_EQ(loom::to_vector(r.read_full("model/w")), iota(70, 0.5f));
  EXPECT_EQ(r.read_full("model/w").shape(), (loom::Shape{10, 7}));
  EXPECT_EQ(loom::to_vector(r.read_full("model/b")), iota(5, -1.0f));
  // A range spanning three pieces of two files, as a reader under another layout asks.
  Tensor part = Tensor::empty({40});
  r.read("model/w", {10, 7}, 20, 60, part);
  const std::vector<float> all = iota(70, 0.5f);
  EXPECT_EQ(loom::to_vector(part), std::vector<float>(all.begin() + 20, all.begin() + 60));
  EXPECT_EQ(r.read_text("trainer_state.json"), "{\"step\": 3}\n");
  const auto model = r.read_all("model");
  ASSERT_EQ(model.size(), 2u);
  EXPECT_EQ(model[1].first, "w");
}

TEST_F(CheckpointSharded, PiecesThatDoNotTileAreRefusedWhenWriting) {
  const Tensor x = loom::from_vector(iota(4, 1.0f), {4});
  loom::write_rank_shard(dir_.string(), 0, {{"model/w", {10}, 0, 4, x}});
  loom::write_rank_shard(dir_.string(), 1, {{"model/w", {10}, 6, 10, x}});
  expect_error([&] { loom::write_manifest(dir_.string(), 2, {}); },
               {"pieces of model/w", "leave out elements from 4"});
  loom::write_rank_shard(dir_.string(), 1, {{"model/w", {10}, 3, 7, x}});
  expect_error([&] { loom::write_manifest(dir_.string(), 2, {}); },
               {"pieces of model/w", "overlap at element 3"});
  loom::write_rank_shard(dir_.string(), 1, {{"model/w", {10}, 4, 8, x}});
  expect_error([&] { loom::write_manifest(dir_.string(), 2, {}); },
               {"pieces of model/w end at element 8 of 10"});
}

TEST_F(CheckpointSharded, MissingFileIsNamed) {
  write_four_ranks();
  fs::remove(path("rank-00001.safetensors"));
  loom::CheckpointReader r(dir_.string());
  EXPECT_EQ(loom::to_vector(r.read_full("model/b")), iota(5, -1.0f));  // not in the lost file
  expect_error([&] { r.read_full("model/w"); },
               {"file rank-00001.safetensors", "holding model/w", "is missing"});
}

TEST_F(CheckpointSharded, CorruptedDataFailsItsChecksum) {
  write_four_ranks();
  {
    std::fstream f(path("rank-00003.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);  // inside model/b's data
    f.put('\x7f');
  }
  loom::CheckpointReader r(dir_.string());
  EXPECT_EQ(loom::to_vector(r.read_full("model/w")).size(), 70u);  // its pieces are intact
  expect_error([&] { r.read_full("model/b"); },
               {"checksum mismatch in rank-00003.safetensors", "model/b [0, 5)"});
}

TEST_F(CheckpointSharded, ChangedTrainerStateFailsItsChecksum) {
  write_four_ranks();
  std::ofstream(path("trainer_state.json")) << "{\"step\": 4}\n";
  expect_error([&] { loom::CheckpointReader(dir_.string()).read_text("trainer_state.json"); },
               {"checksum mismatch in trainer_state.json"});
}

TEST_F(CheckpointSharded, ShapeDisagreementsAreNamed) {
  write_four_ranks();
  // The model expects another shape than the checkpoint holds.
  expect_error(
      [&] {
        loom::CheckpointReader(dir_.string()).read("model/w", {7, 10}, 0, 70, Tensor::empty({70}));
      },
      {"tensor model/w has shape (10, 7), expected (7, 10)"});
  // A manifest whose shape its pieces do not cover.
  edit_manifest([](loom::Json& m) {
    m.at("tensors").at("model/w").set("shape", loom::Json::array({10, 8}));
  });
  expect_error([&] { loom::CheckpointReader r(dir_.string()); },
               {"manifest.json", "pieces of model/w cover 70 of its 80 elements"});
  // A manifest piece larger than what its file holds.
  edit_manifest([](loom::Json& m) {
    loom::Json& pieces = m.at("tensors").at("model/w").at("pieces");
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces.at(i).at("begin").as_int() == 50) pieces.at(i).set("end", 80);
  });
  loom::CheckpointReader r(dir_.string());
  expect_error([&] { r.read_full("model/w"); },
               {"rank-00002.safetensors holds 20 elements of F32 for model/w [50, 80)",
                "the manifest says 30"});
  expect_error([&] { r.read_full("model/nope"); }, {"has no tensor model/nope"});
}

TEST_F(CheckpointSharded, EditedManifestIsCaughtByItsChecksum) {
  write_four_ranks();
  {
    loom::CheckpointReader intact(dir_.string());
    EXPECT_TRUE(intact.manifest_checksummed());
  }
  // A transposed shape with the same element count: every piece still tiles it.
  edit_manifest(
      [](loom::Json& m) {
        m.at("tensors").at("model/w").set("shape", loom::Json::array({7, 10}));
      },
      /*rehash=*/false);
  expect_error([&] { loom::CheckpointReader r(dir_.string()); },
               {"manifest.json does not match its checksum"});
}

TEST_F(CheckpointSharded, DirectoryWithoutManifestOrTensorsIsRefused) {
  expect_error([&] { loom::CheckpointReader r(dir_.string()); }, {"has no manifest.json"});
  expect_error([&] { loom::CheckpointReader r(path("nowhere")); }, {"is not a directory"});
}

}  // namespace
