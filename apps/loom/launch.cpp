#include "launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/core/error.h"

#ifndef LOOM_MPIRUN
#define LOOM_MPIRUN "mpirun"
#endif

namespace loom::cli {

int launch(int argc, char** argv) {
  std::string np, hostfile;
  int i = 0;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    const std::string a = argv[i];
    LOOM_CHECK(i + 1 < argc) << "launch: " << a << " needs a value";
    if (a == "-n" || a == "--np") {
      np = argv[++i];
      char* end = nullptr;
      const long n = std::strtol(np.c_str(), &end, 10);
      LOOM_CHECK(end && *end == 0 && n > 0)
          << "launch: -n '" << np << "' is not a positive integer";
    } else if (a == "--hostfile") {
      hostfile = argv[++i];
    } else {
      LOOM_FAIL() << "launch: unknown option " << a
                  << " (expected -n N [--hostfile FILE] -- COMMAND ...)";
    }
  }
  LOOM_CHECK(!np.empty()) << "launch: -n N is required";
  LOOM_CHECK(i + 1 < argc)
      << "launch: nothing to run (expected -- COMMAND ARGS..., e.g. -- train cfg.toml)";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();

  std::vector<std::string> args = {LOOM_MPIRUN, "-np", np, "--oversubscribe"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  if (!hostfile.empty()) args.insert(args.end(), {"--hostfile", hostfile});
  args.push_back(self);
  for (int k = i + 1; k < argc; ++k) args.push_back(argv[k]);

  std::string line;
  for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
  std::fprintf(stderr, "launch: %s\n", line.c_str());
  std::fflush(stderr);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
  LOOM_FAIL() << "launch: cannot run " << cargs[0] << ": " << std::strerror(errno)
              << " (OpenMPI's mpirun, Debian package openmpi-bin)";
  return 1;
}

}  // namespace loom::cli
