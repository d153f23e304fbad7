#include "rank_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "loom/core/error.h"
#include "loom/dist/world.h"

namespace loom::cli {

namespace {

std::thread g_copier;  // main rank: copies stdout to the console and the log file
std::string g_path;    // this rank's log file, once started

void write_all(int fd, const char* p, ssize_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, size_t(n));
    if (w <= 0) return;
    p += w;
    n -= w;
  }
}

}  // namespace

void start_rank_logs(const std::string& run_dir) {
  if (dist::world_size() == 1) return;
  const int rank = dist::world_rank();
  const std::string dir = run_dir + "/logs";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/rank-" + std::to_string(rank) + ".log";
  g_path = path;
  std::fflush(stdout);
  if (rank != 0) {
    LOOM_CHECK(std::freopen(path.c_str(), "w", stdout)) << "cannot open " << path << " for writing";
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return;
  }
  // Main rank: stdout goes into a pipe; a thread copies it to the console and the file.
  std::FILE* file = std::fopen(path.c_str(), "w");
  LOOM_CHECK(file) << "cannot open " << path << " for writing";
  int fds[2];
  LOOM_CHECK(::pipe(fds) == 0) << "pipe for " << path;
  const int console = ::dup(STDOUT_FILENO);
  ::dup2(fds[1], STDOUT_FILENO);
  ::close(fds[1]);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  g_copier = std::thread([in = fds[0], console, file] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(in, buf, sizeof buf);
      if (n <= 0) break;
      write_all(console, buf, n);
      std::fwrite(buf, 1, size_t(n), file);
      std::fflush(file);
    }
    std::fclose(file);
    ::close(in);
    ::dup2(console, STDOUT_FILENO);  // later output (after stop) goes to the console again
    ::close(console);
  });
}

void stop_rank_logs() {
  std::fflush(stdout);
  if (!g_copier.joinable()) return;
  // Closing the pipe's write end (stdout) ends the copier.
  const int null_fd = ::open("/dev/null", O_WRONLY);
  ::dup2(null_fd, STDOUT_FILENO);
  ::close(null_fd);
  g_copier.join();
}

void append_to_rank_log(const std::string& line) {
  if (g_path.empty()) return;
  std::fflush(stdout);
  if (std::FILE* f = std::fopen(g_path.c_str(), "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

}  // namespace loom::cli
