// JsonlFile: a file of JSON lines holds whole records only, whatever happens while writing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <string>

#include "loom/core/jsonl_file.h"
#include "temp_dir_test.h"

namespace {

std::string read_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const std::string& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

class JsonlFileTest : public TempDirTest {};

TEST_F(JsonlFileTest, AppendingCutsAnUnfinishedLastLineFirst) {
  // What a crash (or an earlier build on a full disk) left: a record cut mid-line.
  const std::string p = path("metrics.jsonl");
  write_text(p, "{\"step\":1}\n{\"step\":2,\"lo");
  {
    loom::JsonlFile f(p, /*append=*/true);
    f.append("{\"step\":2}");
  }
  EXPECT_EQ(read_text(p), "{\"step\":1}\n{\"step\":2}\n");
  // A file of one unfinished line loses it all; a whole file is kept as it is.
  write_text(p, "{\"st");
  loom::JsonlFile(p, true).append("{\"a\":1}");
  EXPECT_EQ(read_text(p), "{\"a\":1}\n");
  loom::JsonlFile(p, true).append("{\"b\":2}");
  EXPECT_EQ(read_text(p), "{\"a\":1}\n{\"b\":2}\n");
}

TEST_F(JsonlFileTest, NotAppendingStartsEmpty) {
  const std::string p = path("metrics.jsonl");
  write_text(p, "{\"old\":1}\n");
  loom::JsonlFile(p, false).append("{\"new\":1}");
  EXPECT_EQ(read_text(p), "{\"new\":1}\n");
}

// A write that the file system takes only in part (the disk fills up mid-record), made real
// with a file size limit: the part written is cut off again and the error names the file.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);  // a short write instead of the signal
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

TEST_F(JsonlFileTest, AShortWriteLeavesNoPartOfItsRecord) {
  const std::string p = path("metrics.jsonl");
  loom::JsonlFile f(p, false);
  f.append("{\"step\":1}");  // 11 bytes with its newline
  std::string error;
  {
    FileSizeLimit limit(11 + 8);  // room for 8 bytes of the next 22
    try {
      f.append("{\"step\":2,\"loss\":0.5}");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("cannot write " + p), std::string::npos) << error;
  EXPECT_EQ(read_text(p), "{\"step\":1}\n");
  f.append("{\"step\":3}");  // the disk has room again: the file goes on whole
  EXPECT_EQ(read_text(p), "{\"step\":1}\n{\"step\":3}\n");

  // Records appended by open-append-close (events.jsonl) follow the same rule.
  const std::string q = path("events.jsonl");
  loom::append_jsonl_record(q, "{\"event\":\"a\"}");
  error.clear();
  {
    FileSizeLimit limit(14 + 5);
    try {
      loom::append_jsonl_record(q, "{\"event\":\"b\"}");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("cannot write " + q), std::string::npos) << error;
  EXPECT_EQ(read_text(q), "{\"event\":\"a\"}\n");
}

}  // namespace
