#include "loom/train/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/core/atomic_file.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {
std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", (long long)step);
  return buf;
}
}  // namespace

std::string save_checkpoint(const std::string& run_dir, int64_t step, dist::ProcessGroup& world,
                            const std::vector<TensorPiece>& pieces, const Json& state,
                            int64_t keep) {
  const fs::path final_dir = fs::path(run_dir) / step_name(step);
  const fs::path tmp_dir = fs::path(run_dir) / (step_name(step) + ".tmp");
  const bool main = world.rank() == 0;
  if (main) {
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  }
  world.barrier()->wait();
  write_rank_shard(tmp_dir.string(), world.rank(), pieces);
  world.barrier()->wait();
  if (main) {
    write_manifest(tmp_dir.string(), world.size(), {{"trainer_state.json", state.dump(2) + "\n"}});
    fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    write_file_atomic((fs::path(run_dir) / "latest").string(), step_name(step) + "\n");
    // Keep the newest `keep` complete checkpoints.
    std::vector<std::string> dirs;
    for (const auto& e : fs::directory_iterator(run_dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("step-", 0) == 0 && n.find(".tmp") == std::string::npos)
        dirs.push_back(n);
    }
    std::sort(dirs.begin(), dirs.end());
    for (size_t i = 0; i + size_t(keep) < dirs.size(); ++i)
      fs::remove_all(fs::path(run_dir) / dirs[i]);
  }
  world.barrier()->wait();  // nobody reads or writes the next checkpoint before this one is in
  return final_dir.string();
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "latest");
  std::string name;
  if (!(in >> name)) return "";
  const fs::path dir = fs::path(run_dir) / name;
  return fs::is_directory(dir) ? dir.string() : "";
}

Json read_trainer_state(const CheckpointReader& ckpt) {
  return Json::parse(ckpt.read_text("trainer_state.json"), ckpt.dir() + "/trainer_state.json");
}

}  // namespace loom::train
