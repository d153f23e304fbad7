// The checkpoint manifest reader: any bytes as manifest.json beside one valid rank file
// (rank-00000.safetensors holding "model/w:0", 6 f32) and a trainer_state.json; then every
// tensor the manifest names is read, as a resume would.
#include <vector>

#include "fuzz_input.h"
#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/core/error.h"
#include "loom/ops/ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string shard = loom::fuzz::scratch_path("ckpt/rank-00000.safetensors");
    std::filesystem::create_directories(std::filesystem::path(shard).parent_path());
    loom::save_safetensors(shard,
                           {{"model/w:0", loom::from_vector(std::vector<float>(6, 1.5f), {6})}});
    std::ofstream(loom::fuzz::scratch_path("ckpt/trainer_state.json")) << "{\"step\": 1}\n";
    return std::filesystem::path(shard).parent_path().string();
  }();
  loom::fuzz::write_input("ckpt/manifest.json", data, size);
  try {
    const loom::CheckpointReader reader(dir);
    for (const std::string& name : reader.names("")) {
      try {
        reader.read_full(name);
      } catch (const loom::Error&) {
      }
    }
    reader.read_text("trainer_state.json");
  } catch (const loom::Error&) {
  }
  return 0;
}
