// The IDX reader (Fashion-MNIST files, raw or gzip): the input is split into an images file
// and a labels file at a point its first two bytes choose.
#include "fuzz_input.h"
#include "loom/core/error.h"
#include "loom/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t cut = 2 + (size_t(data[0]) | size_t(data[1]) << 8) % (size - 1);
  const std::string images = loom::fuzz::write_input("images-idx3-ubyte", data + 2, cut - 2);
  const std::string labels = loom::fuzz::write_input("labels-idx1-ubyte", data + cut, size - cut);
  try {
    loom::load_idx(images, labels);
  } catch (const loom::Error&) {
  }
  return 0;
}
