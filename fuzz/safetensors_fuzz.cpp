// The safetensors reader: any bytes as a .safetensors file; every tensor it returns is read
// to the end (out-of-bounds shapes would show up under ASan).
#include "fuzz_input.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::write_input("file.safetensors", data, size);
  try {
    const loom::SafetensorsFile f = loom::load_safetensors(path);
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : f.tensors) {
      const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ bytes[i];
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
