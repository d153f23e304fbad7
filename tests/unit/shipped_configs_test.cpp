// Every config shipped in configs/ loads: no unknown key, no bad value (a typo in a long run's
// config must not wait for the run to be found).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
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
    // A latent model names the run of a shipped autoencoder config (model.latent =
    // "runs/NAME"): it loads against that config's latents, as a run directory would hold it.
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    std::vector<std::string> overrides;
    if (std::regex_search(text, m, std::regex("\nlatent = \"runs/([a-z_0-9]+)\""))) {
      const auto run = std::filesystem::temp_directory_path() / ("loom_shipped_" + m[1].str());
      std::filesystem::create_directories(run);
      std::filesystem::copy_file(LOOM_SOURCE_DIR "/configs/" + m[1].str() + ".toml",
                                 run / "config.toml",
                                 std::filesystem::copy_options::overwrite_existing);
      overrides.push_back("model.latent=\"" + run.string() + "\"");
    }
    // A Diffusion-DPO config names the run it post-trains, which only training makes: loaded
    // without it here (tests/e2e/mmdit_test.sh checks one against a trained reference).
    if (std::regex_search(text, std::regex("\nreference = \"runs/")))
      overrides.push_back("dpo.reference=\"\"");
    EXPECT_NO_THROW(loom::train::load_config(path, overrides));
  }
  EXPECT_GE(count, 4);  // dit_fmnist, dit_fmnist_full, fmnist_classifier, gpt_kjv
}

}  // namespace
