// AtomicFile: readers see the old file or the whole new one; an abandoned write leaves nothing.
#include <gtest/gtest.h>

#include <unistd.h>
#include "temp_dir_test.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/json_file.h"

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

size_t entries_in(const fs::path& dir) {
  return size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

class CheckpointAtomicFile : public TempDirTest {};

TEST_F(CheckpointAtomicFile, AbandonedWriteKeepsTheOldFile) {
  const fs::path p = dir_ / "state.json";
  loom::write_file_atomic(p.string(), "old");
  try {
    loom::AtomicFile f(p.string());
    f.write("new, but only half");
    EXPECT_TRUE(fs::exists(f.temp_path()));
    EXPECT_EQ(fs::path(f.temp_path()).parent_path(), dir_);  // same file system as the target
    EXPECT_EQ(read_text(p), "old");                          // nothing visible before commit
    throw std::runtime_error("simulated failure mid-write");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_text(p), "old");
  EXPECT_EQ(entries_in(dir_), 1u);  // the temp file is gone
}

TEST_F(CheckpointAtomicFile, CommitReplacesAndRefusesFurtherWrites) {
  const fs::path p = dir_ / "state.json";
  loom::write_file_atomic(p.string(), "old");
  loom::AtomicFile f(p.string());
  f.write("new");
  f.commit();
  EXPECT_EQ(read_text(p), "new");
  EXPECT_EQ(entries_in(dir_), 1u);
  EXPECT_THROW(f.write("more"), loom::Error);
  EXPECT_THROW(f.commit(), loom::Error);
}

TEST_F(CheckpointAtomicFile, MissingDirectoryIsNamed) {
  try {
    loom::write_file_atomic((dir_ / "missing" / "x.json").string(), "{}");
    ADD_FAILURE() << "no error";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing' does not exist"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries_in(dir_), 0u);
}

TEST_F(CheckpointAtomicFile, JsonFilesRoundTripAndNameTheFileInErrors) {
  const std::string p = (dir_ / "trainer_state.json").string();
  const loom::Json state = loom::Json::object({{"step", int64_t(1) << 62}, {"lr", 3e-4}});
  loom::write_json_file(p, state);
  EXPECT_EQ(read_text(p), "{\n  \"step\": 4611686018427387904,\n  \"lr\": 3e-04\n}\n");
  EXPECT_EQ(loom::read_json_file(p), state);
  // An unprintable value fails before anything is written.
  EXPECT_THROW(loom::write_json_file(p, loom::Json::object({{"loss", std::nan("")}})), loom::Error);
  EXPECT_EQ(loom::read_json_file(p), state);
  EXPECT_EQ(entries_in(dir_), 1u);

  std::ofstream(p) << "{\n  \"step\": 1,\n  \"lr\" 2\n}";
  try {
    loom::read_json_file(p);
    ADD_FAILURE() << "no error";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("json: '" + p + "', line 3, column 8: expected ':'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(loom::read_json_file((dir_ / "absent.json").string()), loom::Error);
}

}  // namespace
