// The typed training config: defaults per model kind, --set overrides, and errors that name
// the key (unknown keys, keys of the other model kind, wrong types, bad values).
#include <gtest/gtest.h>

#include "temp_dir_test.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/train/config.h"

namespace {

namespace fs = std::filesystem;
using loom::train::Config;
using loom::train::load_config;

class ConfigTest : public TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string gpt_file() { return write("gpt.toml", "[model]\nkind = \"gpt\"\n"); }
  std::string dit_file() { return write("dit.toml", "[model]\nkind = \"dit\"\n"); }
};

// Runs fn, which must throw a loom::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const loom::Error& e) {
    const std::string what = e.what();
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
    return;
  }
  ADD_FAILURE() << "no error thrown (expected one mentioning '" << parts.front() << "')";
}

TEST_F(ConfigTest, GptDefaults) {
  const Config c = load_config(gpt_file());
  EXPECT_EQ(c.model_kind, loom::train::ModelKind::Gpt);
  const loom::models::GptConfig d;
  EXPECT_EQ(c.gpt().style, loom::models::GptStyle::Gpt2);
  EXPECT_EQ(c.gpt().vocab_size, 256);
  EXPECT_EQ(c.gpt().context, d.context);
  EXPECT_EQ(c.gpt().width, d.width);
  EXPECT_EQ(c.gpt().depth, d.depth);
  EXPECT_EQ(c.gpt().heads, d.heads);
  EXPECT_EQ(c.gpt().kv_heads, 0);
  EXPECT_TRUE(c.gpt().tie_embeddings);
  EXPECT_EQ(c.data.dataset, loom::train::Dataset::Kjv);
  EXPECT_EQ(c.data.path, "");
  EXPECT_DOUBLE_EQ(c.data.val_fraction, 0.05);
  EXPECT_EQ(c.data.tokenizer, "bytes");
  EXPECT_EQ(c.data.cache_dir, "");
  EXPECT_EQ(c.eval.every, 100);
  EXPECT_EQ(c.eval.windows, 64);
  EXPECT_EQ(c.lm_sample.tokens, 0);
  EXPECT_EQ(c.schedule.total_steps, c.train.steps);
  // The resolved config lists the gpt keys, and no DiT key.
  EXPECT_NE(c.resolved_toml.find("vocab_size = 256"), std::string::npos) << c.resolved_toml;
  EXPECT_NE(c.resolved_toml.find("val_fraction"), std::string::npos);
  EXPECT_EQ(c.resolved_toml.find("patch"), std::string::npos);
  EXPECT_EQ(c.resolved_toml.find("[diffusion]"), std::string::npos);
  EXPECT_EQ(c.resolved_toml.find("ema_decay"), std::string::npos);
}

TEST_F(ConfigTest, DitDefaultsAreUnchanged) {
  for (const std::string& path :
       {dit_file(),
        write("defaults.toml", "# every other key at its default\n[model]\nkind = \"dit\"\n")}) {
    const Config c = load_config(path);
    EXPECT_EQ(c.model_kind, loom::train::ModelKind::Dit);
    EXPECT_EQ(c.data.dataset, loom::train::Dataset::FashionMnist);
    EXPECT_EQ(c.data.path, "/usr/share/datasets/fashion-mnist");
    EXPECT_EQ(c.dit().num_classes, c.flow.null_class);
    EXPECT_EQ(c.resolved_toml.find("vocab_size"), std::string::npos);
    EXPECT_EQ(c.resolved_toml.find("val_fraction"), std::string::npos);
  }
}

// A file of blanks and comments sets nothing: it would train every default, which no one asked.
TEST_F(ConfigTest, ConfigOfOnlyCommentsIsEmpty) {
  const std::string path = write("comments.toml", "  \n# nothing set yet\n\n");
  try {
    load_config(path);
    FAIL() << "a config of only comments was accepted";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + " is empty (no settings in it)"), std::string::npos)
        << e.what();
  }
}

TEST_F(ConfigTest, LlamaStyleUntiesTheHeadUnlessTold) {
  const std::string path =
      write("llama.toml",
            "[model]\nkind = \"gpt\"\nstyle = \"llama\"\nwidth = 64\nheads = 4\n"
            "kv_heads = 2\nswiglu_hidden = 128\n");
  Config c = load_config(path);
  EXPECT_TRUE(c.gpt().is_llama());
  EXPECT_FALSE(c.gpt().tie_embeddings);
  EXPECT_EQ(c.gpt().kv_heads, 2);
  EXPECT_EQ(c.gpt().mlp_hidden(), 128);
  c = load_config(path, {"model.tie_embeddings=true"});
  EXPECT_TRUE(c.gpt().tie_embeddings);
}

TEST_F(ConfigTest, SetOverridesFileValues) {
  const std::string path =
      write("gpt.toml",
            "[model]\nkind = \"gpt\"\nwidth = 128\nheads = 4\n"
            "[train]\nsteps = 50\n[data]\ndataset = \"text\"\npath = \"a.txt\"\n");
  const Config c =
      load_config(path, {"model.width=64", "train.steps=70", "data.path=b.txt",
                         "data.val_fraction=0.1", "optim.lr=3e-3", "run.name=x", "eval.every=0"});
  EXPECT_EQ(c.gpt().width, 64);
  EXPECT_EQ(c.gpt().heads, 4);
  EXPECT_EQ(c.train.steps, 70);
  EXPECT_EQ(c.schedule.total_steps, 70);
  EXPECT_EQ(c.data.dataset, loom::train::Dataset::Text);
  EXPECT_EQ(c.data.path, "b.txt");  // a bare word is a string
  EXPECT_DOUBLE_EQ(c.data.val_fraction, 0.1);
  EXPECT_DOUBLE_EQ(c.adamw.lr, 3e-3);
  EXPECT_DOUBLE_EQ(c.schedule.lr, 3e-3);
  EXPECT_EQ(c.run_dir(), "runs/x");
  EXPECT_EQ(c.eval.every, 0);
  // --set can switch the model kind: then the other kind's keys are read.
  const Config d = load_config(dit_file(), {"model.kind=gpt", "model.depth=2"});
  EXPECT_EQ(d.model_kind, loom::train::ModelKind::Gpt);
  EXPECT_EQ(d.gpt().depth, 2);
}

TEST_F(ConfigTest, ResolvedConfigReadsBackTheSame) {
  const Config c = load_config(
      gpt_file(), {"model.width=96", "model.heads=3", "data.tokenizer=tok.bpe",
                   "model.vocab_size=300", "sample.prompt=\"And\\nGod\"", "sample.tokens=5"});
  const Config r = load_config(write("resolved.toml", c.resolved_toml));
  EXPECT_EQ(r.resolved_toml, c.resolved_toml);
  EXPECT_EQ(r.gpt().width, 96);
  EXPECT_EQ(r.gpt().vocab_size, 300);
  EXPECT_EQ(r.data.tokenizer, "tok.bpe");
  EXPECT_EQ(r.lm_sample.prompt, "And\nGod");
}

TEST_F(ConfigTest, TokenDataReadsBackTheSame) {
  for (const std::vector<std::string>& keys :
       {std::vector<std::string>{"data.dataset=tokens", "data.path=/d/kjv"},
        std::vector<std::string>{"data.dataset=tokens", "data.paths=[\"/d/a\", \"/d/b\"]",
                                 "data.weights=[0.75, 0.25]"}}) {
    const Config c = load_config(gpt_file(), keys);
    const Config r = load_config(write("resolved.toml", c.resolved_toml));
    EXPECT_EQ(r.resolved_toml, c.resolved_toml);
    EXPECT_EQ(r.data.paths, c.data.paths);
    EXPECT_EQ(r.data.weights, c.data.weights);
  }
  EXPECT_EQ(load_config(gpt_file(), {"data.dataset=tokens", "data.path=/d/kjv"}).data.weights,
            std::vector<double>{1.0});
}

// train.precision "auto": bf16 where the CPU multiplies bf16 natively, by CPUID here (AMX:
// leaf 7 EDX bit 22; AVX512-BF16: leaf 7 subleaf 1 EAX bit 5) rather than by asking oneDNN as
// the config does; recorded as what it chose, so a resume elsewhere cannot change it silently.
TEST_F(ConfigTest, AutoPrecisionIsBf16WhereTheCpuHasNativeBf16) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
  const bool avx512_bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
  const bool native = amx || avx512_bf16;
  const Config cfg = load_config(dit_file(), {"train.precision=auto"});
  EXPECT_EQ(cfg.train.precision, native ? loom::DType::BF16 : loom::DType::F32);
  EXPECT_NE(cfg.train.precision_choice.find(native ? "bf16 (" : "f32 ("), std::string::npos)
      << cfg.train.precision_choice;
  const std::string recorded = native ? "precision = 'bf16'" : "precision = 'f32'";
  EXPECT_NE(cfg.resolved_toml.find(recorded), std::string::npos) << cfg.resolved_toml;
  EXPECT_EQ(cfg.resolved_toml.find("'auto'"), std::string::npos);
  EXPECT_TRUE(load_config(dit_file(), {"train.precision=f32"}).train.precision_choice.empty());
  expect_error([&] { load_config(dit_file(), {"train.precision=fp16"}); },
               {"train.precision \"fp16\" is not known (auto, f32, bf16"});
}

// A bad value given by --set is blamed on the override; one from the file is not.
TEST_F(ConfigTest, BadOverrideIsNamed) {
  expect_error(
      [&] {
        load_config(dit_file(), {"model.width=48", "train.steps=-4"});
      },
      {"train.steps", "(given by --set train.steps=-4)"});
  try {
    load_config(write("bad.toml", "[model]\nkind = \"dit\"\n[train]\nsteps = -4\n"),
                {"model.width=48"});
    ADD_FAILURE() << "train.steps = -4 accepted";
  } catch (const loom::Error& e) {
    EXPECT_EQ(std::string(e.what()).find("given by"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("bad.toml"), std::string::npos) << e.message();
  }
}

TEST_F(ConfigTest, Tf32IsForTheGpuOnly) {
  expect_error([&] { load_config(gpt_file(), {"train.tf32=true"}); },
               {"train.tf32 is for train.device \"cuda\""});
  EXPECT_FALSE(load_config(gpt_file(), {}).train.tf32);
}

TEST_F(ConfigTest, UnknownKeyIsNamed) {
  expect_error([&] { load_config(gpt_file(), {"train.stepz=5"}); },
               {"unknown key train.stepz", "gpt.toml"});
  expect_error([&] { load_config(gpt_file(), {"modle.width=5"}); }, {"unknown key modle.width"});
  expect_error(
      [&] {
        load_config(gpt_file(), {"train.stepz=5", "model.widht=3"});
      },
      {"unknown keys", "train.stepz", "model.widht"});
}

TEST_F(ConfigTest, KeysOfTheOtherModelKindAreUnknown) {
  // DiT keys in a gpt config.
  for (const std::string key :
       {"model.patch=2", "model.image_size=28", "model.num_classes=10", "train.ema_decay=0.9",
        "train.ema_start=3", "diffusion.label_dropout=0.1", "sample.cfg_scale=2.0",
        "sample.per_class=3", "eval.classifier=\"x\"", "eval.val_images=5"}) {
    SCOPED_TRACE(key);
    expect_error([&] { load_config(gpt_file(), {key}); },
                 {"unknown key " + key.substr(0, key.find('='))});
  }
  // gpt keys in a DiT config.
  for (const std::string key :
       {"model.vocab_size=256", "model.context=64", "model.style=\"gpt2\"", "data.val_fraction=0.1",
        "data.tokenizer=\"bytes\"", "eval.windows=4", "sample.prompt=\"x\"",
        "train.init_from=\"hf\""}) {
    SCOPED_TRACE(key);
    expect_error([&] { load_config(dit_file(), {key}); },
                 {"unknown key " + key.substr(0, key.find('='))});
  }
  // Keys both kinds share are fine in either.
  EXPECT_NO_THROW(
      load_config(gpt_file(), {"model.width=64", "model.heads=4", "model.mlp_ratio=2.0"}));
  EXPECT_NO_THROW(load_config(
      dit_file(), {"model.width=64", "model.heads=4", "model.mlp_ratio=2.0", "eval.every=10"}));
  EXPECT_NO_THROW(load_config(gpt_file(), {"eval.every=10"}));
}

// train.precision: the two dtypes or a recipe, whose [precision] keys are read only then.
TEST_F(ConfigTest, LowPrecisionRecipesAndTheirKeys) {
  const Config c =
      load_config(dit_file(), {"train.precision=\"nvfp4\"", "precision.hadamard=false"});
  ASSERT_TRUE(c.train.low_precision.has_value());
  EXPECT_EQ(c.train.precision, loom::DType::BF16);  // everything but the recipe's GEMMs
  EXPECT_FALSE(c.train.low_precision->hadamard);
  EXPECT_EQ(c.train.low_precision->bf16_blocks, (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(load_config(dit_file(), {"train.precision=\"fp8_blockwise\"", "precision.block_size=64",
                                     "precision.bf16_blocks=[1]"})
                .train.low_precision->block_size,
            64);
  expect_error(
      [&] { load_config(dit_file(), {"train.precision=\"fp6\""}); },
      {"train.precision \"fp6\" is not known (auto, f32, bf16, fp8_tensorwise, fp8_delayed, "
       "fp8_blockwise, mxfp8 or nvfp4)"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"mxfp8\"", "precision.block_size=16"});
      },
      {"precision.block_size 16: mxfp8 blocks are 32 values by the format's definition"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"fp8_blockwise\"", "precision.block_size=100"});
      },
      {"fp8_blockwise takes a power of two from 16 to 1024"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"fp8_tensorwise\"", "precision.block_size=128"});
      },
      {"fp8_tensorwise has no blocks"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"mxfp8\"", "precision.bf16_blocks=[9]"});
      },
      {"precision.bf16_blocks: block 9 does not exist"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"mxfp8\"", "precision.hadamard=true"});
      },
      {"unknown key precision.hadamard"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"bf16\"", "precision.bf16_blocks=[0]"});
      },
      {"unknown key precision.bf16_blocks"});
  expect_error(
      [&] {
        load_config(dit_file(), {"train.precision=\"mxfp8\"", "parallel.data_parallel=\"zero3\"",
                                 "parallel.gather_dtype=\"bf16\""});
      },
      {"quantises the f32 weights; parallel.gather_dtype must stay f32"});
}

TEST_F(ConfigTest, WrongTypeIsNamed) {
  expect_error([&] { load_config(gpt_file(), {"model.width=\"wide\""}); },
               {"model.width must be an integer"});
  expect_error([&] { load_config(gpt_file(), {"model.style=3"}); },
               {"model.style must be a string"});
  expect_error([&] { load_config(gpt_file(), {"model.tie_embeddings=1"}); },
               {"model.tie_embeddings must be true or false"});
  expect_error([&] { load_config(gpt_file(), {"data.val_fraction=\"some\""}); },
               {"data.val_fraction must be a number"});
  expect_error([&] { load_config(write("bad.toml", "[model]\nkind = \"gpt\"\nwidth = 1.5\n")); },
               {"model.width must be an integer", "bad.toml"});
}

TEST_F(ConfigTest, BadValuesAreNamed) {
  const std::string gpt = gpt_file();
  expect_error([&] { load_config(gpt, {"model.kind=rnn"}); },
               {"model.kind 'rnn'", "dit, gpt, vit_classifier, dit_router, mmdit or autoencoder"});
  expect_error([&] { load_config(gpt, {"model.style=rnn"}); }, {"model.style 'rnn'"});
  expect_error(
      [&] {
        load_config(gpt, {"model.width=100", "model.heads=3"});
      },
      {"width 100", "heads 3"});
  expect_error([&] { load_config(gpt, {"model.context=0"}); }, {"context"});
  expect_error([&] { load_config(gpt, {"model.swiglu_hidden=64"}); }, {"swiglu_hidden"});
  expect_error([&] { load_config(gpt, {"data.dataset=mnist"}); },
               {"data.dataset 'mnist'", "kjv, text, tokens or canvas"});
  expect_error([&] { load_config(gpt, {"data.dataset=text"}); }, {"needs data.path"});
  expect_error([&] { load_config(gpt, {"data.dataset=tokens"}); },
               {"needs data.path", "data.paths"});
  expect_error(
      [&] {
        load_config(gpt, {"data.dataset=tokens", "data.paths=[\"a\", \"b\"]", "data.weights=[1]"});
      },
      {"data.weights has 1 entries for 2 data.paths"});
  expect_error(
      [&] {
        load_config(gpt, {"data.dataset=tokens", "data.paths=[\"a\"]", "data.weights=[-1]"});
      },
      {"data.weights must be positive"});
  expect_error([&] { load_config(gpt, {"data.paths=[\"a\"]"}); }, {"unknown key data.paths"});
  expect_error(
      [&] {
        load_config(gpt, {"data.dataset=tokens", "data.paths=[1]"});
      },
      {"data.paths must be an array of strings"});
  expect_error([&] { load_config(gpt, {"data.path=/tmp/x.txt"}); }, {"data.path", "not used"});
  expect_error([&] { load_config(gpt, {"data.val_fraction=0"}); }, {"data.val_fraction", "(0, 1)"});
  expect_error([&] { load_config(gpt, {"data.val_fraction=1.5"}); }, {"data.val_fraction"});
  expect_error([&] { load_config(gpt, {"model.vocab_size=300"}); },
               {"\"bytes\" has 256 tokens", "model.vocab_size is 300"});
  expect_error([&] { load_config(gpt, {"eval.windows=0"}); }, {"eval.windows"});
  expect_error([&] { load_config(gpt, {"train.steps=-4"}); }, {"train.steps"});
  expect_error([&] { load_config(gpt, {"optim.schedule=linear"}); }, {"linear"});
  expect_error([&] { load_config(gpt, {"sample.temperature=-1"}); }, {"sample.temperature"});
  expect_error([&] { load_config(dit_file(), {"data.dataset=kjv"}); },
               {"data.dataset 'kjv'", "fashion_mnist or images"});
  expect_error([&] { load_config(dit_file(), {"data.dataset=images"}); }, {"needs data.path"});
  expect_error(
      [&] {
        load_config(dit_file(),
                    {"data.dataset=images", "data.path=/x", "eval.classifier=assets/c"});
      },
      {"eval.classifier judges samples against Fashion-MNIST"});
  expect_error([&] { load_config(dit_file(), {"data.val_path=/v"}); },
               {"unknown key data.val_path"});
  expect_error([&] { load_config(dit_file(), {"sample.every=-1"}); }, {"sample.every"});
  // A BPE tokenizer path is accepted with any vocab size here; the trainer checks it against
  // the file.
  EXPECT_NO_THROW(load_config(gpt, {"data.tokenizer=tok.bpe", "model.vocab_size=300"}));
}

TEST_F(ConfigTest, MalformedInputNamesTheFile) {
  expect_error([&] { load_config((dir_ / "nope.toml").string()); }, {"nope.toml"});
  expect_error([&] { load_config(write("broken.toml", "[model\nkind = 1\n")); }, {"broken.toml:1"});
  expect_error([&] { load_config(gpt_file(), {"width=3"}); },
               {"--set width=3", "section.key=value"});
}

TEST_F(ConfigTest, DefaultCacheDir) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(loom::train::default_cache_dir("runs"), "/tmp/xdg/loom");
  Config c = load_config(gpt_file());
  EXPECT_EQ(loom::train::resolved_cache_dir(c), "/tmp/xdg/loom");
  c = load_config(gpt_file(), {"data.cache_dir=/data/cache"});
  EXPECT_EQ(loom::train::resolved_cache_dir(c), "/data/cache");
  if (old_xdg) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
}

}  // namespace
