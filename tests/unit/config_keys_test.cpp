// The config reference (train/config_keys.h) against what read_config reads: every key read by
// any model kind under configs that reach every branch must be in the table with the same
// type and default, every row of the table must be read by one of them, and docs/config.md
// must be the table's markdown.
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "temp_dir_test.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/train/config.h"
#include "loom/train/config_keys.h"

namespace {

using loom::train::config_keys;
using loom::train::ConfigFile;
using loom::train::ConfigKey;

const std::string kSource = LOOM_SOURCE_DIR;

class ConfigKeysTest : public TempDirTest {
 protected:
  struct Case {
    std::string path;
    std::vector<std::string> overrides;
  };
  // Configs that between them take every branch of read_config.
  std::vector<Case> cases() {
    const std::string router = (dir_ / "router.toml").string();
    std::ofstream(router) << "[model]\nkind = \"dit_router\"\n[data]\nclusters = \"c.json\"\n";
    const std::string dit = kSource + "/tests/e2e/tiny_dit.toml";
    const std::string gpt = kSource + "/tests/e2e/tiny_gpt.toml";
    return {
        {kSource + "/configs/dit_fmnist.toml", {}},
        {kSource + "/configs/dit_fmnist_full.toml", {}},
        {kSource + "/configs/gpt_kjv.toml", {}},
        {kSource + "/configs/fmnist_classifier.toml", {}},
        {kSource + "/configs/mmdit_canvas.toml", {}},
        {kSource + "/configs/mmdit_canvas.toml", {"data.tokenizer=bpe"}},
        {kSource + "/configs/gpt_captions.toml", {}},
        {kSource + "/configs/autoencoder_canvas.toml", {}},
        {kSource + "/configs/autoencoder_fmnist.toml", {}},
        {dit,
         {"moe.experts=4", "train.precision=fp8_delayed", "lowcomm.method=diloco",
          "lowcomm.workers=2", "train.steps=100"}},
        {dit,
         {"data.dataset=images", "data.path=x", "data.clusters=c", "data.cluster=0",
          "train.precision=fp8_blockwise", "eval.classifier=\"\""}},
        {dit, {"train.precision=nvfp4"}},
        {gpt,
         {"data.dataset=tokens", "data.path=x", "train.init_from=y", "train.device=cuda",
          "train.tf32=true"}},
        {gpt, {"moe.experts=4", "lowcomm.method=diloco", "lowcomm.workers=2", "train.steps=100"}},
        {gpt, {"model.mixers=\"MA\"", "optim.name=\"muon\""}},
        {router, {}},
        {router, {"model.labels=10"}},
    };
  }
};

bool reads_for(const ConfigKey& k, const std::string& kind) {
  if (*k.kinds == 0) return true;
  std::istringstream words(k.kinds);
  for (std::string w; words >> w;)
    if (w == kind) return true;
  return false;
}

// The TOML value of `text` ("v = text"), for comparing defaults by value: 0.1 and
// 0.10000000000000001 are one double, 1 and 1.0 are not one value.
toml::table value_of(const std::string& text) {
  return toml::parse("v = " + text);
}

TEST_F(ConfigKeysTest, EveryKeyReadIsInTheReferenceWithItsTypeAndDefault) {
  for (const Case& c : cases()) {
    std::vector<ConfigFile::Read> reads;
    const std::string kind = loom::train::load_config(c.path, c.overrides, &reads).spec().name;
    for (const ConfigFile::Read& r : reads) {
      const std::string name = r.section + "." + r.key;
      SCOPED_TRACE(c.path + " (model.kind " + kind + "): " + name);
      std::vector<const ConfigKey*> rows;
      for (const ConfigKey& k : config_keys())
        if (name == k.name && reads_for(k, kind)) rows.push_back(&k);
      ASSERT_EQ(rows.size(), 1u) << "rows of the reference for this key and kind";
      EXPECT_EQ(rows[0]->type, r.type);
      if (rows[0]->fallback[0] == '(') continue;  // computed from other keys, said in words
      EXPECT_EQ(value_of(rows[0]->fallback), value_of(r.fallback))
          << "the reference says " << rows[0]->fallback << ", the reader falls back to "
          << r.fallback;
    }
  }
}

TEST_F(ConfigKeysTest, EveryRowOfTheReferenceIsRead) {
  std::set<std::pair<std::string, std::string>> read;  // (key, kind)
  for (const Case& c : cases()) {
    std::vector<ConfigFile::Read> reads;
    const std::string kind = loom::train::load_config(c.path, c.overrides, &reads).spec().name;
    for (const ConfigFile::Read& r : reads) read.insert({r.section + "." + r.key, kind});
  }
  for (const ConfigKey& k : config_keys()) {
    bool found = false;
    for (const auto& [name, kind] : read) found |= name == k.name && reads_for(k, kind);
    EXPECT_TRUE(found) << k.name << " (model.kind " << (*k.kinds ? k.kinds : "any")
                       << ") is in the reference but no config read it";
  }
}

TEST_F(ConfigKeysTest, DocsAreTheReference) {
  std::ifstream in(kSource + "/docs/config.md");
  std::stringstream docs;
  docs << in.rdbuf();
  EXPECT_TRUE(docs.str() == loom::train::config_keys_markdown())
      << "docs/config.md differs from the reference: regenerate it with "
      << "`build/loom config keys --markdown > docs/config.md`";
}

TEST_F(ConfigKeysTest, TextOfOneSection) {
  const std::string text = loom::train::config_keys_text("optim");
  EXPECT_NE(text.find("[optim]"), std::string::npos);
  EXPECT_NE(text.find("optim.lr (number) = 0.001"), std::string::npos) << text;
  EXPECT_NE(text.find("allowed: constant, cosine, wsd"), std::string::npos) << text;
  EXPECT_EQ(text.find("\n  train."), std::string::npos) << text;
  EXPECT_EQ(loom::train::config_keys_text("nosuch"), "");
}

// A key the reference knows but this config does not read says when it is read; a typo of a
// key that only the reference knows (this config never reads it) still gets its did-you-mean.
TEST_F(ConfigKeysTest, UnusedKeysSayWhenTheyAreRead) {
  const std::string dit = kSource + "/tests/e2e/tiny_dit.toml";
  auto message = [&](const std::vector<std::string>& overrides) {
    try {
      loom::train::load_config(dit, overrides);
    } catch (const loom::Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"lowcomm.workers=2"})
                .find("unknown key lowcomm.workers (not used by this config: read for "
                      "model.kind dit, gpt when lowcomm.method = \"diloco\")"),
            std::string::npos)
      << message({"lowcomm.workers=2"});
  EXPECT_NE(message({"model.vocab_size=3"})
                .find("model.vocab_size (not used by this config: read for model.kind gpt, "
                      "mmdit when data.tokenizer = \"bpe\")"),
            std::string::npos)
      << message({"model.vocab_size=3"});
  EXPECT_NE(message({"lowcomm.worker=2"}).find("(did you mean lowcomm.workers?)"),
            std::string::npos)
      << message({"lowcomm.worker=2"});
}

}  // namespace
