// `loom train` with train.device = "cuda": the one training loop, the recipes, the checkpoints
// and the evaluation on the device. The same runs on the CPU are the reference: the loss curves
// agree step for step, a resumed device run continues bit for bit where its checkpoint left
// off, and the held-out figures, samples and end-of-run files come out as on the host.
//
// Under the emulated backend (loom_cuda_emulated_tests) device memory is host memory, so these
// tests also rely on Tensor::data_ptr() refusing a device tensor: host code that reads device
// memory fails here as it would crash on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>
#include <sstream>

#include "loom/backend/cpu/attention_gemm.h"
#include "loom/checkpoint/run_checkpoints.h"
#include "loom/checkpoint/sharded.h"
#include "loom/core/json.h"
#include "loom/core/json_file.h"
#include "loom/data/npy.h"
#include "loom/ops/ops.h"
#include "loom/train/config.h"
#include "loom/train/trainer.h"
#include "png_folder.h"

namespace {

namespace fs = std::filesystem;
using loom::Json;

struct RunFiles {
  std::string dir;
  std::vector<double> losses;  // by step, from metrics.jsonl
  std::vector<double> val;     // the held-out losses logged, in order
  Json last;                   // the last line
};

std::string temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("loom_cuda_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// A text the byte-level GPT can learn something of in a few steps.
std::string text_file(const std::string& dir) {
  const std::string path = dir + "/text.txt";
  std::ofstream out(path);
  for (int i = 0; i < 400; ++i)
    out << "In the beginning was the word " << i % 17 << ", and the word was with loom.\n";
  return path;
}

std::string write_config(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/config.toml";
  std::ofstream(path) << text;
  return path;
}

RunFiles run(const std::string& config, std::vector<std::string> overrides,
             const std::string& resume_from = "") {
  overrides.push_back("run.id=\"test\"");
  const loom::train::Config c = loom::train::load_config(config, overrides);
  loom::train::train(c, resume_from);
  RunFiles r{c.run_dir(), {}, {}, Json()};
  std::ifstream in(c.run_dir() + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (!j.contains("loss")) continue;
    const size_t step = size_t(j.at("step").as_int());
    if (r.losses.size() < step) r.losses.resize(step, NAN);
    r.losses[step - 1] = j.at("loss").as_double();
    if (j.contains("val")) {
      const Json& v = j.at("val");
      r.val.push_back((v.contains("loss") ? v.at("loss") : v.at("nats_per_token")).as_double());
    }
    r.last = j;
  }
  return r;
}

// A run's overrides: those every run of a test shares, then its own.
std::vector<std::string> joined(std::vector<std::string> shared,
                                const std::vector<std::string>& own) {
  shared.insert(shared.end(), own.begin(), own.end());
  return shared;
}

void expect_close(const std::vector<double>& cpu, const std::vector<double>& cuda, double tol,
                  const char* what) {
  ASSERT_EQ(cpu.size(), cuda.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(cuda[i], cpu[i], tol * std::fabs(cpu[i])) << what << ", step " << i + 1;
}

// The model's weights in a run's last checkpoint, by name.
std::map<std::string, std::vector<float>> checkpoint_weights(const std::string& run_dir) {
  const loom::CheckpointReader reader(loom::latest_checkpoint(run_dir));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : reader.read_all("model")) out[name] = loom::to_vector(t);
  return out;
}

const char* kGpt = R"(
[run]
name = "gpt"
[model]
kind = "gpt"
style = "gpt2"
vocab_size = 256
context = 32
width = 64
depth = 2
heads = 4
[data]
dataset = "text"
tokenizer = "bytes"
[train]
steps = 8
batch_size = 4
log_every = 1
ckpt_every = 4
[eval]
every = 4
windows = 8
[optim]
lr = 3e-3
[sample]
prompt = "In the"
tokens = 8
)";

TEST(CudaTrainer, GptTrainsOnTheDeviceAsOnTheHost) {
  const std::string dir = temp_dir("gpt");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> common = {"data.path=\"" + text_file(dir) + "\"",
                                           "run.out_dir=\"" + dir + "\""};
  auto with = [&](const std::vector<std::string>& more) { return joined(common, more); };
  const RunFiles cpu = run(config, with({"run.name=\"cpu\""}));
  const RunFiles cuda = run(config, with({"run.name=\"cuda\"", "train.device=\"cuda\""}));
  // f32: the two backends differ in summation order only (as tests/cuda/cuda_training_test).
  expect_close(cpu.losses, cuda.losses, 2e-3, "gpt2 f32 training loss");
  EXPECT_LT(cuda.losses.back(), cuda.losses.front());
  // The held-out evaluations (steps 4 and 8, and the final one) ran on the device too.
  ASSERT_EQ(cuda.val.size(), 2u);
  expect_close(cpu.val, cuda.val, 2e-3, "gpt2 held-out loss");
  const Json cpu_eval = loom::read_json_file(cpu.dir + "/eval.json");
  const Json cuda_eval = loom::read_json_file(cuda.dir + "/eval.json");
  EXPECT_NEAR(cuda_eval.at("nats_per_token").as_double(), cpu_eval.at("nats_per_token").as_double(),
              2e-3 * cpu_eval.at("nats_per_token").as_double());
  // The memory figures are the device's: its parameters and optimizer state.
  EXPECT_GT(cuda.last.at("mem").at("parameters").at("live").as_double(), 0);

  // bf16 autocast on the device, against bf16 on the host (bf16's tolerance).
  const RunFiles cpu16 = run(config, with({"run.name=\"cpu16\"", "train.precision=\"bf16\""}));
  const RunFiles cuda16 = run(
      config, with({"run.name=\"cuda16\"", "train.device=\"cuda\"", "train.precision=\"bf16\""}));
  expect_close(cpu16.losses, cuda16.losses, 3e-2, "gpt2 bf16 training loss");
  fs::remove_all(dir);
}

// fp8 with one scale per tensor: on the device the block's linear layers run on the fp8 GEMM
// (cast on the device), on the host through the recipe's emulation. The casts give the same
// codes; what differs is f32 summation order, which fp8 rounding may turn into a code of
// difference here and there, and the rest of the step runs in bf16 (on a GPU, cuDNN's
// attention): bf16's bound, 3e-2 (seen under emulation: 1e-4 relative over 8 steps). The host
// runs its flash-style attention, whose f32 probabilities match the device's own kernel, and
// come nearer cuDNN's than the host's bf16 GEMM attention (which rounds P and dS otherwise:
// seen on an H200, the gradients' amax 4% and 12.5% from cuDNN's with flash, 16% and 19% with
// the GEMM attention).
TEST(CudaTrainer, Fp8RecipesTrainOnTheDeviceAsOnTheHost) {
  loom::cpu::ForceFlashAttention flash;
  const std::string dir = temp_dir("fp8");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> common = {"data.path=\"" + text_file(dir) + "\"",
                                           "run.out_dir=\"" + dir + "\"", "sample.tokens=0",
                                           "eval.every=0"};
  for (const std::string recipe : {"fp8_tensorwise", "fp8_delayed"}) {
    SCOPED_TRACE(recipe);
    auto with = [&](const std::vector<std::string>& more) {
      return joined(joined(common, {"train.precision=\"" + recipe + "\""}), more);
    };
    const RunFiles cpu = run(config, with({"run.name=\"cpu_" + recipe + "\""}));
    const RunFiles cuda =
        run(config, with({"run.name=\"cuda_" + recipe + "\"", "train.device=\"cuda\""}));
    expect_close(cpu.losses, cuda.losses, 3e-2, "gpt2 fp8 training loss");
    EXPECT_LT(cuda.losses.back(), cuda.losses.front());
    // The last step's cast statistics, counted on the device, as on the host. The gradients'
    // amax is the largest layer's, bound as each layer's is below.
    for (const char* role : {"input", "weight", "grad"}) {
      const Json& c = cpu.last.at("precision").at(role);
      const Json& g = cuda.last.at("precision").at(role);
      const double bound = std::string(role) == "grad" ? 0.15 : 3e-2;
      EXPECT_NEAR(g.at("amax").as_double(), c.at("amax").as_double(),
                  bound * c.at("amax").as_double())
          << role;
      EXPECT_NEAR(g.at("flushed").as_double(), c.at("flushed").as_double(), 1e-3) << role;
      EXPECT_NEAR(g.at("saturated").as_double(), c.at("saturated").as_double(), 1e-3) << role;
    }
    // fp8_delayed: each layer's amaxes, the entries its histories took, layer by layer. A
    // layer's gradient max moves with one E5M2 code flipped upstream (neighbouring codes are
    // up to 25% apart): seen 4%, bound 15% (a layer given another's counts is off by far more).
    if (recipe == "fp8_delayed") {
      const Json& c = cpu.last.at("precision").at("amax");
      const Json& g = cuda.last.at("precision").at("amax");
      ASSERT_EQ(g.items().size(), c.items().size());
      for (const auto& [layer, roles] : c.items())
        for (const char* role : {"input", "weight", "grad"}) {
          const double expected = roles.at(role).as_double();
          EXPECT_NEAR(g.at(layer).at(role).as_double(), expected, 0.15 * expected)
              << layer << " " << role;
        }
    }
  }
  fs::remove_all(dir);
}

// The block-scaled recipes on the device: each operand quantised on the host (the same codes as
// the host's run), the GEMMs on the device in f32. The loss curves as the host's, within the
// fp8 recipes' bound (a product summed in another order can move a later code by one), and
// the cast counts alike.
TEST(CudaTrainer, BlockScaledRecipesTrainOnTheDeviceAsOnTheHost) {
  loom::cpu::ForceFlashAttention flash;
  const std::string dir = temp_dir("blockscaled");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> common = {"data.path=\"" + text_file(dir) + "\"",
                                           "run.out_dir=\"" + dir + "\"", "sample.tokens=0",
                                           "eval.every=0"};
  for (const std::string recipe : {"fp8_blockwise", "mxfp8", "nvfp4"}) {
    SCOPED_TRACE(recipe);
    std::vector<std::string> recipe_keys = {"train.precision=\"" + recipe + "\""};
    if (recipe == "nvfp4")  // its default keeps the first and last blocks (here: all) in bf16
      recipe_keys.push_back("precision.bf16_blocks=[]");
    auto with = [&](const std::vector<std::string>& more) {
      return joined(joined(common, recipe_keys), more);
    };
    const RunFiles cpu = run(config, with({"run.name=\"cpu_" + recipe + "\""}));
    const RunFiles cuda =
        run(config, with({"run.name=\"cuda_" + recipe + "\"", "train.device=\"cuda\""}));
    expect_close(cpu.losses, cuda.losses, 3e-2, "gpt2 block-scaled training loss");
    EXPECT_LT(cuda.losses.back(), cuda.losses.front());
    for (const char* role : {"input", "weight", "grad"}) {
      const Json& c = cpu.last.at("precision").at(role);
      const Json& g = cuda.last.at("precision").at(role);
      EXPECT_NEAR(g.at("flushed").as_double(), c.at("flushed").as_double(), 1e-3) << role;
      EXPECT_NEAR(g.at("saturated").as_double(), c.at("saturated").as_double(), 1e-3) << role;
    }
  }
  fs::remove_all(dir);
}

TEST(CudaTrainer, ResumedDeviceRunContinuesBitForBit) {
  const std::string dir = temp_dir("resume");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> base = {"data.path=\"" + text_file(dir) + "\"",
                                         "run.out_dir=\"" + dir + "\"", "train.device=\"cuda\"",
                                         "sample.tokens=0", "eval.every=0"};
  auto with = [&](const std::vector<std::string>& more) { return joined(base, more); };
  const RunFiles whole = run(config, with({"run.name=\"whole\""}));
  // The same run stopped after step 4 (its checkpoint: weights and AdamW moments read back from
  // the device), then resumed from that checkpoint into the device.
  const RunFiles first = run(config, with({"run.name=\"split\"", "train.stop_after=4"}));
  ASSERT_EQ(first.losses.size(), 4u);
  const RunFiles resumed =
      run(config, with({"run.name=\"split\""}), loom::latest_checkpoint(first.dir));
  ASSERT_EQ(resumed.losses.size(), whole.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_EQ(resumed.losses[i], whole.losses[i]) << "step " << i + 1;
  EXPECT_EQ(checkpoint_weights(resumed.dir), checkpoint_weights(whole.dir));
  // An asynchronous checkpoint snapshots the device's values the same.
  const RunFiles async = run(config, with({"run.name=\"async\"", "train.async_checkpoint=true"}));
  EXPECT_EQ(checkpoint_weights(async.dir), checkpoint_weights(whole.dir));
  fs::remove_all(dir);
}

using loom::test::png_folder;

TEST(CudaTrainer, DitTrainsEvaluatesAndSamplesOnTheDevice) {
  const std::string dir = temp_dir("dit");
  const std::string train_images = png_folder(dir + "/train", 64, 1);
  const std::string val_images = png_folder(dir + "/val", 16, 2);
  const std::string config = write_config(dir, R"(
[run]
name = "dit"
[model]
kind = "dit"
image_size = 28
channels = 1
patch = 7
width = 32
depth = 2
heads = 2
num_classes = 10
[data]
dataset = "images"
[train]
steps = 6
batch_size = 8
log_every = 1
[optim]
lr = 1e-3
[sample]
steps = 2
per_class = 1
every = 3
[eval]
every = 3
val_images = 16
)");
  const std::vector<std::string> common = {"run.out_dir=\"" + dir + "\"",
                                           "data.path=\"" + train_images + "\"",
                                           "data.val_path=\"" + val_images + "\""};
  auto with = [&](const std::vector<std::string>& more) { return joined(common, more); };
  const RunFiles cpu = run(config, with({"run.name=\"cpu\""}));
  const RunFiles cuda = run(config, with({"run.name=\"cuda\"", "train.device=\"cuda\""}));
  expect_close(cpu.losses, cuda.losses, 2e-3, "dit f32 training loss");
  // The held-out loss (device) at steps 3 and 6, the EMA's sample grids (device) and the final
  // samples.
  ASSERT_EQ(cuda.val.size(), 2u);
  expect_close(cpu.val, cuda.val, 2e-3, "dit held-out loss");
  EXPECT_TRUE(fs::exists(cuda.dir + "/samples/step-000003.png"));
  EXPECT_TRUE(fs::exists(cuda.dir + "/samples.png"));
  fs::remove_all(dir);
}

// Fashion-MNIST's four IDX files (uncompressed) with n synthetic images each split: every
// class a bright square at its own place on a noisy background, made here so the test needs no
// dataset on the machine.
std::string idx_folder(const std::string& dir, int n) {
  fs::create_directories(dir);
  auto u32 = [](std::ofstream& out, uint32_t v) {
    const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
    out.write(b, 4);
  };
  for (const char* split : {"train", "t10k"}) {
    std::ofstream images(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
    std::ofstream labels(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
    u32(images, 0x803), u32(images, uint32_t(n)), u32(images, 28), u32(images, 28);
    u32(labels, 0x801), u32(labels, uint32_t(n));
    uint32_t state = split[0] == 't' ? 7 : 1;
    for (int i = 0; i < n; ++i) {
      const int label = i % 10;
      labels.put(char(label));
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          state = state * 1664525u + 1013904223u;
          const bool square = y / 7 == label / 4 && x / 7 == label % 4;
          images.put(char(square ? 200 + (state >> 27) : (state >> 26)));
        }
    }
  }
  return dir;
}

// Every figure of an end-of-run result on the device as on the host, to 1e-3 relative (but the
// wall-clock seconds); the same keys, texts and counts.
void expect_same_figures(const Json& cpu, const Json& cuda, const std::string& at) {
  ASSERT_EQ(cpu.is_object(), cuda.is_object()) << at;
  if (!cpu.is_object()) {
    if (cpu.is_double())
      EXPECT_NEAR(cuda.as_double(), cpu.as_double(), 1e-3 * std::fabs(cpu.as_double())) << at;
    else
      EXPECT_TRUE(cuda == cpu) << at;
    return;
  }
  ASSERT_EQ(cpu.size(), cuda.size()) << at;
  for (const auto& [key, value] : cpu.items())
    if (key != "train_seconds") expect_same_figures(value, cuda.at(key), at + "." + key);
}

// The three image kinds besides the DiT and the MMDiT: the ViT classifier (its convolutional
// stem, flips and shifts), the decentralized experts' router (a ViT told the noise level) and
// the KL autoencoder, each trained on the device against the same run on the host (f32: the
// backends differ in summation order only), with the end-of-run evaluation each makes.
TEST(CudaTrainer, ClassifierRouterAndAutoencoderTrainOnTheDevice) {
  const std::string dir = temp_dir("vit");
  const std::string data = idx_folder(dir + "/fmnist", 64);
  std::vector<int64_t> clusters(64);
  for (size_t i = 0; i < clusters.size(); ++i) clusters[i] = int64_t(i % 10 < 5);
  loom::write_npy(dir + "/clusters.npy", loom::from_vector(clusters, {64}));
  const std::string common_text = R"(
[optim]
lr = 2e-3
[train]
steps = 10
batch_size = 16
log_every = 1
)";
  const std::string classifier = write_config(dir, std::string(R"(
[run]
name = "classifier"
[model]
kind = "vit_classifier"
patch = 7
width = 32
depth = 2
heads = 2
stem_channels = 4
[data]
path = ")") + data + "\"\n" + common_text + "augment = true\n");
  const std::string router_path = dir + "/router.toml";
  std::ofstream(router_path) << R"(
[run]
name = "router"
[model]
kind = "dit_router"
patch = 7
width = 32
depth = 1
heads = 2
num_classes = 2
labels = 10
[data]
path = ")" << data << "\"\nclusters = \""
                             << dir << "/clusters.npy\"\n"
                             << common_text;
  const std::string autoencoder_path = dir + "/autoencoder.toml";
  std::ofstream(autoencoder_path) << R"(
[run]
name = "autoencoder"
[model]
kind = "autoencoder"
image_size = 28
width = 8
downsamples = 2
latent_channels = 4
[data]
dataset = "fashion_mnist"
path = ")" << data << "\"\n" << common_text
                                  << "[eval]\nval_images = 16\n";
  for (const std::string& config : {classifier, router_path, autoencoder_path}) {
    SCOPED_TRACE(config);
    const std::vector<std::string> out = {"run.out_dir=\"" + dir + "\""};
    const RunFiles cpu = run(config, joined(out, {"run.name=\"cpu\""}));
    const RunFiles cuda = run(config, joined(out, {"run.name=\"cuda\"", "train.device=\"cuda\""}));
    expect_close(cpu.losses, cuda.losses, 2e-3, "training loss");
    EXPECT_LT(cuda.losses.back(), cuda.losses.front());
    // The end-of-run evaluation of the device's weights (test accuracy, the router's accuracy
    // by noise level, held-out PSNR and the latents' statistics) as the host's.
    const Json cpu_eval = loom::read_json_file(cpu.dir + "/eval.json");
    const Json cuda_eval = loom::read_json_file(cuda.dir + "/eval.json");
    expect_same_figures(cpu_eval, cuda_eval, "eval.json");
  }
  fs::remove_all(dir);
}

// run.device_memory_limit_mb bounds the device allocator: a GPT of 1.6M parameters (24.8 MB of
// weights, gradients and AdamW moments) on one process fails under the 14.9 MB that ZeRO-3 over
// 4 processes trains in (StagedTrainer.ZeroThreeTrainsAModelAboveOneProcessDeviceLimit); a
// limit below one block's weights is refused before anything runs; the host has no such key.
// optim.offload: AdamW's moments in host memory. The device holds no optimizer state at any
// time (its allocator's peak), and the run equals the one with the moments on the device (the
// same update, run by the host).
TEST(CudaTrainer, OffloadedOptimizerStateLeavesTheDevice) {
  const std::string dir = temp_dir("offload");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> common = {"data.path=\"" + text_file(dir) + "\"",
                                           "run.out_dir=\"" + dir + "\"", "train.device=\"cuda\""};
  auto with = [&](const std::vector<std::string>& more) { return joined(common, more); };
  const RunFiles on_device = run(config, with({"run.name=\"device\""}));
  const RunFiles offloaded = run(config, with({"run.name=\"host\"", "optim.offload=true"}));
  expect_close(on_device.losses, offloaded.losses, 1e-6, "gpt2 loss with the moments offloaded");
  const auto optimizer_peak = [](const RunFiles& r) {
    return r.last.at("mem").at("optimizer").at("peak").as_double();
  };
  EXPECT_GT(optimizer_peak(on_device), 0);
  EXPECT_EQ(optimizer_peak(offloaded), 0) << "optimizer state on the device";
  // The parameters stay on the device.
  EXPECT_EQ(offloaded.last.at("mem").at("parameters").at("peak").as_double(),
            on_device.last.at("mem").at("parameters").at("peak").as_double());
  fs::remove_all(dir);
}

// optim.offload under ZeRO-1/2 on the device: the f32 master and both moments in host memory,
// updated there; the device keeps a copy of the parameters, all-gathered after each step. In
// f32 the run equals the one with the state on the device. With parallel.gather_dtype "bf16"
// the device keeps the copy in bf16 and converts a unit's parameters to f32 only while it runs
// (as ZeRO-3 gathers them): the run then equals ZeRO-3 with bf16 gathers, whose forward
// computes from the same bf16 values of the same f32 master, and the device's parameter peak falls
// by 2 bytes a parameter, less the f32 of the units converted at once. ZeRO-1 accumulating two
// micro-steps releases each unit after its backward on the step that does not reduce. A resumed run
// continues as the unbroken one.
TEST(CudaTrainer, OffloadedZeroOneTwoKeepMasterOnTheHost) {
  const std::string dir = temp_dir("offload12");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> common = {"data.path=\"" + text_file(dir) + "\"",
                                           "run.out_dir=\"" + dir + "\"",
                                           "train.device=\"cuda\"",
                                           "model.depth=6",
                                           "sample.tokens=0",
                                           "eval.every=0"};
  auto with = [&](const std::vector<std::string>& more) { return joined(common, more); };
  const std::string zero1 = "parallel.data_parallel=\"zero1\"",
                    zero2 = "parallel.data_parallel=\"zero2\"",
                    zero3 = "parallel.data_parallel=\"zero3\"",
                    bf16 = "parallel.gather_dtype=\"bf16\"", offload = "optim.offload=true";
  const auto peak = [](const RunFiles& r, const char* category) {
    return r.last.at("mem").at(category).at("peak").as_double();
  };

  const RunFiles device = run(config, with({"run.name=\"zero2\"", zero2}));
  const RunFiles host = run(config, with({"run.name=\"zero2-offload\"", zero2, offload}));
  expect_close(device.losses, host.losses, 1e-6, "zero2 loss, master offloaded");
  EXPECT_GT(peak(device, "optimizer"), 0);
  EXPECT_EQ(peak(host, "optimizer"), 0) << "optimizer state on the device";
  EXPECT_EQ(peak(host, "parameters"), peak(device, "parameters")) << "the f32 copy";

  const RunFiles zero3_bf16 = run(config, with({"run.name=\"zero3-bf16\"", zero3, bf16}));
  const RunFiles kept =
      run(config, with({"run.name=\"zero2-offload-bf16\"", zero2, offload, bf16}));
  expect_close(zero3_bf16.losses, kept.losses, 1e-6, "zero2 with bf16 parameters offloaded");
  EXPECT_LT(kept.losses.back(), kept.losses.front());
  EXPECT_EQ(peak(kept, "optimizer"), 0);
  // GPT-2 of kGpt at depth 6: token and position embeddings (the head tied), per block two
  // norms, qkv, projection and the MLP with biases, the final norm.
  const double V = 256, T = 32, C = 64, depth = 6;
  const double block =
      2 * 2 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C;
  const double params = V * C + T * C + depth * block + 2 * C;
  std::printf("device parameter peak: %.0f B in f32, %.0f B kept in bf16 (%.0f parameters)\n",
              peak(device, "parameters"), peak(kept, "parameters"), params);
  EXPECT_GE(peak(device, "parameters"), 4 * params);
  // bf16 for every parameter, f32 for at most two blocks at once (one running, the next
  // prefetched) or the embeddings' unit and a block.
  EXPECT_LE(peak(kept, "parameters"), 2 * params + 4 * 2 * block + 4096);

  const RunFiles zero3_accum =
      run(config, with({"run.name=\"zero3-accum\"", zero3, bf16, "train.grad_accum=2"}));
  const RunFiles zero1_accum =
      run(config, with({"run.name=\"zero1-accum\"", zero1, offload, bf16, "train.grad_accum=2"}));
  expect_close(zero3_accum.losses, zero1_accum.losses, 1e-6, "zero1 accumulating, bf16 kept");
  EXPECT_LE(peak(zero1_accum, "parameters"), 2 * params + 4 * 2 * block + 4096);

  // Resumed from the step-4 checkpoint: the master comes back to the host, the device's copy
  // from it.
  const RunFiles first =
      run(config, with({"run.name=\"split\"", zero2, offload, bf16, "train.stop_after=4"}));
  const RunFiles resumed = run(config, with({"run.name=\"split\"", zero2, offload, bf16}),
                               loom::latest_checkpoint(first.dir));
  ASSERT_EQ(resumed.losses.size(), kept.losses.size());
  for (size_t i = 0; i < kept.losses.size(); ++i)
    EXPECT_EQ(resumed.losses[i], kept.losses[i]) << "step " << i + 1;

  // The host has nothing to offload from: bf16 parameters need ZeRO-3 there.
  try {
    run(config, joined({"data.path=\"" + text_file(dir) + "\"", "run.out_dir=\"" + dir + "\""},
                       {"run.name=\"refused\"", zero2, offload, bf16}));
    ADD_FAILURE() << "bf16 parameters under ZeRO-2 on the host were not refused";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero1/zero2 with optim.offload = true on "
                                         "train.device \"cuda\" (data parallelism here: zero2)"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// DiLoCo's outer state (global weights, outer momentum, the average, both error-feedback
// residuals: five f32 copies of the weights) lives on the parameters' device, or with
// lowcomm.outer_state = "host" in host memory; the run is the same. AdamW's moments are
// offloaded in both, so the device's optimizer-state peak is DiLoCo's alone: exactly five
// times the parameters' bytes on the device, none on the host.
TEST(CudaTrainer, DiLoCoOuterStateLivesOnTheDevice) {
  const std::string dir = temp_dir("diloco");
  const std::string config = write_config(dir, kGpt);
  const std::vector<std::string> common = {"data.path=\"" + text_file(dir) + "\"",
                                           "run.out_dir=\"" + dir + "\"",
                                           "train.device=\"cuda\"",
                                           "optim.offload=true",
                                           "lowcomm.method=\"diloco\"",
                                           "lowcomm.workers=1",
                                           "lowcomm.inner_steps=2",
                                           "lowcomm.compression=\"int8\"",
                                           "sample.tokens=0",
                                           "eval.every=0"};
  auto with = [&](const std::vector<std::string>& more) { return joined(common, more); };
  const RunFiles device = run(config, with({"run.name=\"device\""}));
  const RunFiles host = run(config, with({"run.name=\"host\"", "lowcomm.outer_state=\"host\""}));
  expect_close(host.losses, device.losses, 1e-5, "gpt2 DiLoCo loss, outer state on the device");
  const auto peak = [](const RunFiles& r, const char* category) {
    return r.last.at("mem").at(category).at("peak").as_double();
  };
  EXPECT_EQ(peak(host, "optimizer"), 0) << "outer state on the device";
  EXPECT_EQ(peak(device, "optimizer"), 5 * peak(device, "parameters"));
  fs::remove_all(dir);
}

TEST(CudaTrainer, DeviceMemoryLimitIsHeld) {
  const std::string dir = temp_dir("limit");
  const std::string config = write_config(dir, kGpt);
  auto error_of = [&](const std::vector<std::string>& more) {
    std::vector<std::string> overrides = {"data.path=\"" + text_file(dir) + "\"",
                                          "run.out_dir=\"" + dir + "\"", "model.width=128",
                                          "model.depth=8", "train.device=\"cuda\""};
    overrides.insert(overrides.end(), more.begin(), more.end());
    try {
      loom::train::train(loom::train::load_config(config, overrides), "");
    } catch (const loom::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string over = error_of({"run.name=\"over\"", "run.device_memory_limit_mb=14.86"});
  EXPECT_NE(over.find("memory limit of 14 MB exceeded"), std::string::npos) << over;
  const std::string block = error_of({"run.name=\"block\"", "run.device_memory_limit_mb=0.5"});
  EXPECT_NE(block.find("run.device_memory_limit_mb 0.5 MB is below one gathered block (blocks."),
            std::string::npos)
      << block;
  EXPECT_FALSE(fs::exists(dir + "/block")) << "refused before the run directory is made";
  const std::string host = error_of({"train.device=\"cpu\"", "run.device_memory_limit_mb=10"});
  EXPECT_NE(host.find("run.device_memory_limit_mb is for train.device \"cuda\""), std::string::npos)
      << host;
  // The limit stays with the allocator after a failed run: lifted for the tests that follow.
  dynamic_cast<loom::CachingAllocator&>(loom::allocator_for(loom::DeviceType::CUDA)).set_limit(0);
  fs::remove_all(dir);
}

TEST(CudaTrainer, EveryLayoutAndRecipeIsAllowed) {
  const std::string dir = temp_dir("refused");
  const std::string config = write_config(dir, kGpt);
  auto error_of = [&](std::vector<std::string> overrides) {
    overrides.insert(overrides.begin(), "data.path=\"" + text_file(dir) + "\"");
    overrides.insert(overrides.begin(), "train.device=\"cuda\"");
    try {
      loom::train::load_config(config, overrides);
    } catch (const loom::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto expect_error = [&](const std::vector<std::string>& overrides, const std::string& says) {
    const std::string error = error_of(overrides);
    EXPECT_NE(error.find(says), std::string::npos) << error;
  };
  // Every parallel layout, the mixture of experts, DiLoCo and every precision recipe train on
  // the device; an unknown device is refused by name.
  for (const char* recipe : {"fp8_blockwise", "mxfp8", "nvfp4"})
    EXPECT_EQ(error_of({std::string("train.precision=\"") + recipe + "\""}), "no error") << recipe;
  for (const char* mode : {"ddp", "zero1", "zero2", "zero3"})
    EXPECT_EQ(error_of({std::string("parallel.data_parallel=\"") + mode + "\""}), "no error")
        << mode;
  for (const char* layout : {"parallel.tp=2", "parallel.cp=2", "parallel.pp=2", "moe.experts=4"})
    EXPECT_EQ(error_of({layout}), "no error") << layout;
  EXPECT_EQ(error_of({"moe.experts=4", "parallel.ep=2"}), "no error");
  EXPECT_EQ(error_of({"lowcomm.method=\"diloco\"", "lowcomm.workers=2", "lowcomm.inner_steps=4"}),
            "no error");
  expect_error({"train.device=\"tpu\""}, "is not known (cpu or cuda)");
  fs::remove_all(dir);
}

}  // namespace
