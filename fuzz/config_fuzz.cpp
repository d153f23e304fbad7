// The TOML config loader: any bytes as a config file.
#include "fuzz_input.h"
#include "loom/core/error.h"
#include "loom/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::write_input("config.toml", data, size);
  try {
    loom::train::load_config(path, {});
  } catch (const loom::Error&) {
  }
  return 0;
}
