// Shared by the fuzz targets: Loom's readers take paths, so each input is written to a file in
// /dev/shm (per process) and read through the same code a user's file goes through. Errors
// Loom reports (loom::Error) are the expected outcome for bad input; anything else -- a crash,
// a sanitizer report, another exception, a hang -- is a finding.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace loom::fuzz {

inline std::string scratch_path(const std::string& name) {
  const std::string dir = "/dev/shm/loom_fuzz_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_path(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

}  // namespace loom::fuzz
