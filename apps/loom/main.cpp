// The `loom` command line. Subcommands arrive with the issues that build them.
#include <cstdio>
#include <cstring>
#include <exception>

#include "loom/core/error.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: loom <command> [args]\n"
               "commands:\n"
               "  train CONFIG   train a model from a TOML config\n"
               "  version        print the version\n");
  return 2;
}

int train(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::printf("loom train: no model yet - the training loop arrives with the end-to-end "
              "training issue; the tensor core, kernels and autograd are built and tested "
              "(make test)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  try {
    if (!std::strcmp(argv[1], "train")) return train(argc - 2, argv + 2);
    if (!std::strcmp(argv[1], "version")) {
      std::printf("loom 0.1.0\n");
      return 0;
    }
    return usage();
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 1;
  }
}
