// `loom train` with train.device = "cuda" on several processes under the emulation, with
// dist.device_group = "staged": every exchange of device tensors (gradients, ZeRO's shards and
// gathers, TP's activations, PP's stage inputs and their gradients) goes through host memory
// over MPI (dist/staged_group.h). Each layout on the device against the same layout on the
// host: the loss curves agree step for step within f32's summation-order tolerance, and fall.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/json.h"
#include "loom/dist/world.h"
#include "loom/train/config.h"
#include "loom/train/trainer.h"
#include "png_folder.h"

namespace {

namespace fs = std::filesystem;

const char* kGpt = R"(
[run]
name = "gpt"
[model]
kind = "gpt"
vocab_size = 256
context = 32
width = 64
depth = 2
heads = 4
[data]
dataset = "text"
[train]
steps = 6
batch_size = 6
log_every = 1
[eval]
every = 0
windows = 4
[optim]
lr = 3e-3
)";

const char* kDit = R"(
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
batch_size = 12
log_every = 1
[optim]
lr = 1e-3
[sample]
steps = 2
per_class = 1
[eval]
every = 0
val_images = 16
)";

// The losses by step of a run's metrics.jsonl.
std::vector<double> losses_of(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const loom::Json j = loom::Json::parse(line);
    if (j.contains("loss")) out.push_back(j.at("loss").as_double());
  }
  return out;
}

using Layouts = std::vector<std::pair<std::string, std::vector<std::string>>>;

// Runs each layout of `config` (with `data`'s overrides) on the host and on the device, every
// rank, and compares the two loss curves.
class StagedTrainer : public testing::Test {
 protected:
  void SetUp() override {
    world_ = loom::dist::world();
    // One directory for every rank (they share a parent, mpirun's), written by rank 0.
    dir_ = (fs::temp_directory_path() / ("loom_staged_trainer_" + std::to_string(::getppid())))
               .string();
    if (world_->rank() == 0) {
      fs::remove_all(dir_);
      fs::create_directories(dir_);
      std::ofstream text(dir_ + "/text.txt");
      for (int i = 0; i < 400; ++i) text << "In the beginning was the word " << i % 17 << ".\n";
      loom::test::png_folder(dir_ + "/train", 64, 1);
      loom::test::png_folder(dir_ + "/val", 16, 2);
      std::ofstream(dir_ + "/gpt.toml") << kGpt;
      std::ofstream(dir_ + "/dit.toml") << kDit;
    }
    world_->barrier()->wait();
  }
  void TearDown() override {
    world_->barrier()->wait();
    if (world_->rank() == 0) fs::remove_all(dir_);
  }

  std::vector<double> run(const std::string& model, const std::string& name,
                          const std::string& device, const std::vector<std::string>& layout) {
    std::vector<std::string> overrides = {
        "run.out_dir=\"" + dir_ + "\"",       "run.name=\"" + name + "\"",    "run.id=\"test\"",
        "train.device=\"" + device + "\"",    "dist.device_group=\"staged\"", "dist.timeout_s=60",
        "data.path=\"" + dir_ + "/text.txt\""};
    if (model == "dit") {  // 16 held-out images: fewer than one chunk for each dp rank
      overrides.back() = "data.path=\"" + dir_ + "/train\"";
      overrides.push_back("data.val_path=\"" + dir_ + "/val\"");
    }
    overrides.insert(overrides.end(), layout.begin(), layout.end());
    loom::train::train(loom::train::load_config(dir_ + "/" + model + ".toml", overrides), "");
    world_->barrier()->wait();  // rank 0's files are complete
    return losses_of(dir_ + "/" + name);
  }

  // The bytes of a run's samples.png (a diffusion model's, sampled from its EMA at the end).
  std::string sample_bytes(const std::string& run_name) const {
    std::ifstream in(dir_ + "/" + run_name + "/samples.png", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void compare(const std::string& model, const Layouts& layouts) {
    for (const auto& [name, layout] : layouts) {
      const std::vector<double> cpu = run(model, model + "-" + name + "-cpu", "cpu", layout);
      const std::vector<double> cuda = run(model, model + "-" + name + "-cuda", "cuda", layout);
      ASSERT_EQ(cpu.size(), 6u) << model << " " << name;
      ASSERT_EQ(cuda.size(), cpu.size()) << model << " " << name;
      for (size_t i = 0; i < cpu.size(); ++i)
        EXPECT_NEAR(cuda[i], cpu[i], 2e-3 * std::fabs(cpu[i]))
            << model << " " << name << ", step " << i + 1;
      EXPECT_LT(cuda.back(), cuda.front()) << model << " " << name;
    }
  }

  std::shared_ptr<loom::dist::ProcessGroup> world_;
  std::string dir_;
};

TEST_F(StagedTrainer, GptLayoutsOnTheDeviceTrainAsOnTheHost) {
  // The data-parallel layouts: ZeRO's flat buffers, reduce-scatters and gathers (bf16 ones
  // too) live on the device.
  Layouts layouts = {
      {"ddp", {}},
      {"zero1", {"parallel.data_parallel=\"zero1\""}},
      {"zero2", {"parallel.data_parallel=\"zero2\"", "train.grad_accum=2"}},
      {"zero3", {"parallel.data_parallel=\"zero3\""}},
      {"zero3bf16", {"parallel.data_parallel=\"zero3\"", "parallel.gather_dtype=\"bf16\""}},
      // AdamW's moments in host memory, the device's gradients and weights stepped there.
      {"ddpoffload", {"optim.offload=true"}},
      {"zero3offload", {"parallel.data_parallel=\"zero3\"", "optim.offload=true"}}};
  if (world_->size() % 2 == 0) {
    // HSDP (2 replicas of ZeRO-3 shards); tensor parallelism with the vocabulary split, and
    // with sequence parallelism; pipelines of 2 stages, and of 2 x 2 interleaved chunks.
    layouts.push_back({"hsdp", {"parallel.data_parallel=\"zero3\"", "parallel.dp_replicate=2"}});
    layouts.push_back({"tp2", {"parallel.tp=2"}});
    layouts.push_back({"tp2sp", {"parallel.tp=2", "parallel.sequence_parallel=true"}});
    layouts.push_back({"pp2", {"parallel.pp=2", "train.grad_accum=2"}});
    layouts.push_back({"pp2interleaved",
                       {"parallel.pp=2", "parallel.pipeline_schedule=\"interleaved\"",
                        "parallel.pipeline_chunks=2", "model.depth=4", "train.grad_accum=2"}});
    layouts.push_back({"cp2ring", {"parallel.cp=2"}});
    layouts.push_back({"cp2ulysses", {"parallel.cp=2", "parallel.context_parallel=\"ulysses\""}});
  }
  compare("gpt", layouts);
}

TEST_F(StagedTrainer, DiLoCoOnTheDeviceTrainsAsOnTheHost) {
  // A worker a process, an outer step every 3 inner steps: the outer state on the host, the
  // device weights copied to it and back at each outer step. Uncompressed, int8 and int4 with
  // error feedback, and streamed in 3 fragments with mixing.
  const std::vector<std::string> diloco = {"lowcomm.method=\"diloco\"",
                                           "lowcomm.workers=" + std::to_string(world_->size()),
                                           "lowcomm.inner_steps=3"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), diloco.begin(), diloco.end());
    return more;
  };
  compare("gpt", {{"diloco", with({})},
                  {"diloco-int8", with({"lowcomm.compression=\"int8\""})},
                  {"diloco-int4", with({"lowcomm.compression=\"int4\""})},
                  {"diloco-streamed", with({"lowcomm.fragments=3", "lowcomm.overlap_steps=0",
                                            "lowcomm.mixing=0.5"})}});
}

TEST_F(StagedTrainer, MixtureOfExpertsOnTheDeviceTrainsAsOnTheHost) {
  // 4 experts, 2 a token, a shared one, the selection bias and both balancing losses: the
  // router's losses and the experts' grouped GEMMs on the device; under ep the tokens'
  // dispatch and return (uneven all-to-all) through the device group; under cp each rank routes
  // its rows' tokens.
  const std::vector<std::string> moe = {
      "moe.experts=4",      "moe.top_k=2",     "moe.hidden=32",        "moe.shared_experts=1",
      "moe.bias_rate=0.01", "moe.z_loss=1e-3", "model.style=\"llama\""};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), moe.begin(), moe.end());
    return more;
  };
  Layouts layouts = {{"ddp", with({})}, {"zero3", with({"parallel.data_parallel=\"zero3\""})}};
  if (world_->size() % 2 == 0) {
    layouts.push_back({"ep2", with({"parallel.ep=2"})});
    layouts.push_back({"tp2", with({"parallel.tp=2"})});
    layouts.push_back({"cp2", with({"parallel.cp=2"})});
  }
  compare("gpt", layouts);
}

TEST_F(StagedTrainer, DitLayoutsOnTheDeviceTrainAsOnTheHost) {
  Layouts layouts = {{"zero3", {"parallel.data_parallel=\"zero3\""}}};
  if (world_->size() % 2 == 0) {
    layouts.push_back({"tp2sp", {"parallel.tp=2", "parallel.sequence_parallel=true"}});
    layouts.push_back({"pp2", {"parallel.pp=2", "train.grad_accum=2"}});
    layouts.push_back({"cp2ring", {"parallel.cp=2"}});
  }
  compare("dit", layouts);
}

// NCCL cannot join processes that share a GPU (the emulated machine has one): asked for it,
// every rank stops before training with one error naming both numbers and the way out.
TEST_F(StagedTrainer, NcclRefusesMoreProcessesThanGpus) {
  std::string error = "no error";
  try {
    run("gpt", "gpt-nccl", "cuda", {"dist.device_group=\"nccl\""});
  } catch (const loom::Error& e) {
    error = e.what();
  }
  const std::string says = "dist.device_group \"nccl\": " + std::to_string(world_->size()) +
                           " processes on this machine for its 1 GPU(s); NCCL needs a GPU for " +
                           "each process";
  EXPECT_NE(error.find(says), std::string::npos) << error;
  EXPECT_NE(error.find("dist.device_group = \"staged\""), std::string::npos) << error;
}

// A GPT whose weights, gradients and AdamW moments (16 bytes a parameter) need more than the
// device memory limit set for each process trains under ZeRO-3 over 4 device processes within
// it; each rank's device peak is printed. (4 processes: cuda.emulated_dist_np4 runs this alone.)
// optim.offload under ZeRO-3: the f32 master and AdamW's moments of each shard in host memory,
// the device holding only the shard as the gather sends it (bf16 here); the update runs on a
// host thread while the next forward goes on. The loss curve equals the one with the state on
// the device; each rank's device peaks: no optimizer state, and parameters lower by the f32
// master less its bf16 copy (2 bytes an element of the shard). The DiT has an EMA, which reads
// the master after each step.
TEST_F(StagedTrainer, OffloadedZeroThreeKeepsMasterAndMomentsOnTheHost) {
  const int64_t P = world_->size();
  // The device's peak of a memory category on this rank, over the run (its last logged step).
  auto peak = [&](const std::string& name, const char* category) {
    const std::string run_dir = dir_ + "/" + name;
    const std::string metrics = world_->rank() == 0 ? run_dir + "/metrics.jsonl"
                                                    : run_dir + "/logs/metrics-rank-" +
                                                          std::to_string(world_->rank()) + ".jsonl";
    double bytes = -1;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const loom::Json j = loom::Json::parse(line);
      if (j.contains("mem")) bytes = j.at("mem").at(category).at("peak").as_double();
    }
    return bytes;
  };
  const std::vector<std::string> zero3 = {"parallel.data_parallel=\"zero3\"",
                                          "parallel.gather_dtype=\"bf16\""};
  std::vector<std::string> offloaded = zero3;
  offloaded.push_back("optim.offload=true");
  for (const std::string model : {"gpt", "dit"}) {
    const std::vector<double> on_device = run(model, model + "-zero3", "cuda", zero3);
    const std::vector<double> on_host = run(model, model + "-zero3-offload", "cuda", offloaded);
    ASSERT_EQ(on_device.size(), 6u) << model;
    ASSERT_EQ(on_host.size(), on_device.size()) << model;
    for (size_t i = 0; i < on_device.size(); ++i)
      EXPECT_NEAR(on_host[i], on_device[i], 1e-6 * std::fabs(on_device[i]))
          << model << ", step " << i + 1;
    if (model == "dit" && world_->rank() == 0) {  // sampled from the EMA, at the end
      EXPECT_FALSE(sample_bytes("dit-zero3").empty());
      EXPECT_TRUE(sample_bytes("dit-zero3") == sample_bytes("dit-zero3-offload"))
          << "the EMAs differ";
    }
    EXPECT_GT(peak(model + "-zero3", "optimizer"), 0) << model;
    EXPECT_EQ(peak(model + "-zero3-offload", "optimizer"), 0) << model;
    if (model == "gpt") {
      // GPT-2 of kGpt: 118,528 parameters (its log line), sharded over P ranks.
      const double saved =
          peak("gpt-zero3", "parameters") - peak("gpt-zero3-offload", "parameters");
      std::printf(
          "rank %d: device parameter peak %.0f B with the master on the device, %.0f B "
          "offloaded (%.0f B less)\n",
          world_->rank(), peak("gpt-zero3", "parameters"), peak("gpt-zero3-offload", "parameters"),
          saved);
      EXPECT_GE(saved, 0.95 * 2.0 * 118528.0 / double(P));
    }
  }
}

// optim.offload under ZeRO-1/2 with bf16 parameters on the device: each rank's f32 master
// shard and its moments in host memory, the device keeping every parameter in bf16 (all-gathered
// in bf16 after each step) and converting a unit's to f32 only while it runs. ZeRO-3 with bf16
// gathers computes from the same values of the same master: the loss curves equal, also as
// HSDP (the replicas take replica 0's masters at the start), and the DiT's EMA, read from the
// host's master, samples the same image bytes.
TEST_F(StagedTrainer, OffloadedZeroOneTwoKeepBf16ParametersOnTheDevice) {
  const std::string bf16 = "parallel.gather_dtype=\"bf16\"", offload = "optim.offload=true";
  std::vector<std::pair<std::string, std::vector<std::string>>> pairs = {
      {"zero2", {"parallel.data_parallel=\"zero2\""}},
      {"zero1", {"parallel.data_parallel=\"zero1\"", "train.grad_accum=2"}}};
  if (world_->size() % 2 == 0)
    pairs.push_back({"hsdp2", {"parallel.data_parallel=\"zero2\"", "parallel.dp_replicate=2"}});
  for (const std::string model : {"gpt", "dit"}) {
    for (const auto& [name, layout] : pairs) {
      if (model == "dit" && name != "zero2") continue;
      std::vector<std::string> zero3 = layout, kept = layout;
      zero3[0] = "parallel.data_parallel=\"zero3\"";
      zero3.push_back(bf16);
      kept.push_back(bf16);
      kept.push_back(offload);
      const std::string tag = model + "-" + name;
      const std::vector<double> reference = run(model, tag + "-zero3", "cuda", zero3);
      const std::vector<double> offloaded = run(model, tag + "-kept", "cuda", kept);
      ASSERT_EQ(reference.size(), 6u) << tag;
      ASSERT_EQ(offloaded.size(), reference.size()) << tag;
      for (size_t i = 0; i < reference.size(); ++i)
        EXPECT_NEAR(offloaded[i], reference[i], 1e-6 * std::fabs(reference[i]))
            << tag << ", step " << i + 1;
      if (model == "dit" && world_->rank() == 0) {
        EXPECT_FALSE(sample_bytes(tag + "-zero3").empty());
        EXPECT_TRUE(sample_bytes(tag + "-zero3") == sample_bytes(tag + "-kept"))
            << "the EMAs differ";
      }
    }
  }
}

TEST_F(StagedTrainer, ZeroThreeTrainsAModelAboveOneProcessDeviceLimit) {
  ASSERT_EQ(world_->size(), 4) << "run under mpirun -np 4";
  const int64_t V = 256, T = 32, C = 128, depth = 8;
  // GPT-2's parameters, counted from its definition: token and position embeddings (the head
  // tied to the first), per block two norms (weight, bias), qkv and projection, the MLP's two
  // layers with biases; the final norm.
  const int64_t params =
      V * C + T * C +
      depth * (2 * 2 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C) +
      2 * C;
  const double state_mb = 16.0 * double(params) / 1048576.0, limit_mb = 0.6 * state_mb;
  const std::vector<std::string> layout = {
      "model.width=128", "model.depth=8", "train.batch_size=8", "parallel.data_parallel=\"zero3\"",
      "run.device_memory_limit_mb=" + std::to_string(limit_mb)};
  const std::vector<double> losses = run("gpt", "gpt-zero3-limited", "cuda", layout);
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_LT(losses.back(), losses.front());
  // Every rank's device peak (metrics: the last logged step's), under the limit.
  const std::string run_dir = dir_ + "/gpt-zero3-limited";
  const std::string metrics = world_->rank() == 0 ? run_dir + "/metrics.jsonl"
                                                  : run_dir + "/logs/metrics-rank-" +
                                                        std::to_string(world_->rank()) + ".jsonl";
  double peak = 0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const loom::Json j = loom::Json::parse(line);
    if (j.contains("mem_peak_bytes")) peak = j.at("mem_peak_bytes").as_double();
  }
  std::printf(
      "rank %d: %lld parameters, %.2f MB of weights, gradients and AdamW state; device "
      "limit %.2f MB a process; device peak %.2f MB\n",
      world_->rank(), (long long)params, state_mb, limit_mb, peak / 1048576.0);
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, limit_mb * 1048576.0);
}

}  // namespace
