#include "loom/data/text.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"

namespace loom {
namespace {

// Whether an executable `name` is on $PATH. Checked up front because popen of a missing
// program only shows up as exit status 127 with a shell message on stderr.
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    // An empty entry means the current directory.
    const std::filesystem::path candidate =
        (dir.empty() ? std::filesystem::path(".") : std::filesystem::path(dir)) / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0)
      return true;
  }
  return false;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  LOOM_CHECK(std::filesystem::is_regular_file(path))
      << "text file " << path << " does not exist or is not a regular file";
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in) << "cannot open text file " << path << ": " << std::strerror(errno);
  std::ostringstream out;
  out << in.rdbuf();
  LOOM_CHECK(!in.bad()) << "reading text file " << path << " failed";
  return out.str();
}

std::string kjv_corpus(const std::string& cache_dir) {
  const std::filesystem::path target = std::filesystem::path(cache_dir) / "kjv.txt";
  // The file only ever appears complete (atomic rename), so its existence means it is done.
  if (std::filesystem::is_regular_file(target)) return target.string();

  LOOM_CHECK(on_path("bible")) << "kjv_corpus: the `bible` program is not installed (needed to "
                                  "produce "
                               << target.string()
                               << "); install bible-kjv (apt-get install "
                                  "bible-kjv bible-kjv-text)";
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  LOOM_CHECK(!ec) << "kjv_corpus: cannot create cache directory " << cache_dir << ": "
                  << ec.message();

  // stdin from /dev/null: `bible` turns interactive when it thinks it has a terminal.
  const char* command = "bible \"Gen1:1-Rev22:21\" < /dev/null";
  std::FILE* pipe = ::popen(command, "r");
  LOOM_CHECK(pipe != nullptr) << "kjv_corpus: cannot run `" << command
                              << "`: " << std::strerror(errno);
  std::string text;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, got);
  const int status = ::pclose(pipe);
  LOOM_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "kjv_corpus: `" << command << "` failed (status " << status
      << "); is bible-kjv-text installed?";
  // The full book is about 4.3 MB; much less means the data package is missing or broken.
  LOOM_CHECK(text.size() > 1000000) << "kjv_corpus: `" << command << "` printed only "
                                    << text.size() << " bytes, expected about 4.3 MB";

  AtomicFile out(target.string());
  out.write(text);
  out.commit();
  return target.string();
}

TextSplit split_text(const std::string& text, double val_fraction) {
  LOOM_CHECK(val_fraction >= 0.0 && val_fraction < 1.0)
      << "split_text: val_fraction = " << val_fraction << ", expected a value in [0, 1)";
  const size_t n_val = size_t(std::llround(double(text.size()) * val_fraction));
  const size_t n_train = text.size() - n_val;
  TextSplit split;
  split.train.assign(text.begin(), text.begin() + ptrdiff_t(n_train));
  split.val.assign(text.begin() + ptrdiff_t(n_train), text.end());
  return split;
}

}  // namespace loom
