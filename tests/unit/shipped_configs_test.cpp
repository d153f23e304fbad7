// Every config shipped in configs/ loads: no unknown key, no bad value (a typo in a long run's
// config must not wait for the run to be found).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "loom/train/config.h"

namespace {

TEST(ShippedConfigs, EveryConfigLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(LOOM_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string path = entry.path().string();
    SCOPED_TRACE(path);
    ++count;
    EXPECT_NO_THROW(loom::train::load_config(path));
  }
  EXPECT_GE(count, 4);  // dit_fmnist, dit_fmnist_full, fmnist_classifier, gpt_kjv
}

}  // namespace
