// Text corpora: whole-file reads, the deterministic tail split, and the KJV corpus cache.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "temp_dir_test.h"

#include "loom/core/error.h"
#include "loom/data/text.h"

namespace {

namespace fs = std::filesystem;

class DataText : public TempDirTest {};

TEST_F(DataText, ReadsBytesExactly) {
  const std::string bytes("line one\r\nzero\0byte \xff\xfe end", 26);
  const fs::path p = dir_ / "t.txt";
  std::ofstream(p, std::ios::binary) << bytes;
  EXPECT_EQ(loom::read_text_file(p.string()), bytes);
}

TEST_F(DataText, MissingFileNamesThePath) {
  const std::string p = (dir_ / "absent.txt").string();
  try {
    loom::read_text_file(p);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST_F(DataText, SplitTakesTheTail) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + i % 26);
  const loom::TextSplit split = loom::split_text(text, 0.1);
  ASSERT_EQ(split.train.size(), 900u);
  ASSERT_EQ(split.val.size(), 100u);
  EXPECT_EQ(std::string(split.train.begin(), split.train.end()), text.substr(0, 900));
  EXPECT_EQ(std::string(split.val.begin(), split.val.end()), text.substr(900));
  EXPECT_TRUE(loom::split_text(text, 0.0).val.empty());
  EXPECT_THROW(loom::split_text(text, 1.0), loom::Error);
  EXPECT_THROW(loom::split_text(text, -0.1), loom::Error);
}

TEST_F(DataText, KjvCorpusIsProducedOnceAndCached) {
  ASSERT_TRUE(fs::exists("/usr/bin/bible"))
      << "bible-kjv is not installed (scripts/bootstrap.sh installs it)";
  const std::string path = loom::kjv_corpus((dir_ / "cache").string());
  EXPECT_EQ(path, (dir_ / "cache" / "kjv.txt").string());
  const std::string text = loom::read_text_file(path);
  EXPECT_GT(text.size(), 4000000u);
  EXPECT_NE(text.find("In the beginning God created the heaven and the earth."), std::string::npos);
  EXPECT_NE(text.find("The grace of our Lord Jesus Christ be with you all. Amen."),
            std::string::npos);
  // No temporary file is left next to it; a second call reuses the file as is.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "cache"), fs::directory_iterator()), 1);
  const auto written = fs::last_write_time(path);
  EXPECT_EQ(loom::kjv_corpus((dir_ / "cache").string()), path);
  EXPECT_EQ(fs::last_write_time(path), written);
}

TEST_F(DataText, KjvCorpusWithoutBibleSaysWhatToInstall) {
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", (dir_ / "empty_bin").c_str(), 1);
  try {
    loom::kjv_corpus((dir_ / "cache").string());
    ADD_FAILURE() << "no error although `bible` is not on PATH";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("install bible-kjv"), std::string::npos) << e.what();
  }
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_FALSE(fs::exists(dir_ / "cache" / "kjv.txt"));
}

}  // namespace
