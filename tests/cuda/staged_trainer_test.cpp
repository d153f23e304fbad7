// `loom train` with train.device = "cuda" on several processes under the emulation, with
// dist.device_group = "staged": the device tensors of the gradient exchange go through host
// memory over MPI (dist/staged_group.h). The DDP run on the device against the same run on the host: the loss
// curves agree step for step within f32's summation-order tolerance.
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

TEST(StagedTrainer, DdpOnTheDeviceTrainsAsOnTheHost) {
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
  auto run = [&](const std::string& name, const std::string& device) {
    const loom::train::Config c = loom::train::load_config(
        dir + "/config.toml",
        {"data.path=\"" + dir + "/text.txt\"", "run.out_dir=\"" + dir + "\"",
         "run.name=\"" + name + "\"", "run.id=\"test\"", "train.device=\"" + device + "\"",
         "dist.device_group=\"staged\""});
    loom::train::train(c, "");
    world->barrier()->wait();  // rank 0's files are complete
    return losses_of(c.run_dir());
  };
  const std::vector<double> cpu = run("cpu", "cpu"), cuda = run("cuda", "cuda");
  ASSERT_EQ(cpu.size(), 6u);
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(cuda[i], cpu[i], 2e-3 * std::fabs(cpu[i])) << "step " << i + 1;
  EXPECT_LT(cuda.back(), cuda.front());
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
