// `loom train` with train.device = "cuda" on several processes under the emulation, with
// dist.device_group = "staged": the device tensors of the gradient exchange go through host
// memory over MPI (dist/staged_group.h). The DDP run on the device against the same run on the
// host: the loss curves agree step for step within f32's summation-order tolerance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loom/core/json.h"
#include "loom/dist/world.h"
#include "loom/train/config.h"
#include "loom/train/trainer.h"

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

TEST(StagedTrainer, DataParallelOnTheDeviceTrainsAsOnTheHost) {
  auto world = loom::dist::world();
  // One directory for every rank (they share a parent, mpirun's), written by rank 0.
  const std::string dir =
      (fs::temp_directory_path() / ("loom_staged_trainer_" + std::to_string(::getppid()))).string();
  if (world->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream text(dir + "/text.txt");
    for (int i = 0; i < 400; ++i) text << "In the beginning was the word " << i % 17 << ".\n";
    std::ofstream(dir + "/config.toml") << kGpt;
  }
  world->barrier()->wait();
  auto run = [&](const std::string& name, const std::string& device,
                 const std::vector<std::string>& layout) {
    std::vector<std::string> overrides = {
        "data.path=\"" + dir + "/text.txt\"", "run.out_dir=\"" + dir + "\"",
        "run.name=\"" + name + "\"",          "run.id=\"test\"",
        "train.device=\"" + device + "\"",    "dist.device_group=\"staged\""};
    overrides.insert(overrides.end(), layout.begin(), layout.end());
    loom::train::train(loom::train::load_config(dir + "/config.toml", overrides), "");
    world->barrier()->wait();  // rank 0's files are complete
    return losses_of(dir + "/" + name);
  };
  // Each data-parallel layout on the device against the same layout on the host: ZeRO's flat
  // buffers, reduce-scatters and gathers (bf16 ones too) live on the device.
  std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"ddp", {}},
      {"zero1", {"parallel.data_parallel=\"zero1\""}},
      {"zero2", {"parallel.data_parallel=\"zero2\"", "train.grad_accum=2"}},
      {"zero3", {"parallel.data_parallel=\"zero3\""}},
      {"zero3bf16", {"parallel.data_parallel=\"zero3\"", "parallel.gather_dtype=\"bf16\""}}};
  if (world->size() % 2 == 0)  // HSDP: 2 replicas of ZeRO-3 shards
    layouts.push_back({"hsdp", {"parallel.data_parallel=\"zero3\"", "parallel.dp_replicate=2"}});
  for (const auto& [name, layout] : layouts) {
    const std::vector<double> cpu = run(name + "-cpu", "cpu", layout);
    const std::vector<double> cuda = run(name + "-cuda", "cuda", layout);
    ASSERT_EQ(cpu.size(), 6u) << name;
    ASSERT_EQ(cuda.size(), cpu.size()) << name;
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_NEAR(cuda[i], cpu[i], 2e-3 * std::fabs(cpu[i])) << name << ", step " << i + 1;
    EXPECT_LT(cuda.back(), cuda.front()) << name;
  }
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
