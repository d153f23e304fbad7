#include "loom/train/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/core/atomic_file.h"
#include "loom/ops/ops.h"
#include "loom/train/events.h"

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
    sync_directory(run_dir);  // the rename itself survives a crash
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

std::string checkpoint_dir_name(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / step_name(step)).string();
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "latest");
  std::string name;
  if (!(in >> name)) return "";
  const fs::path dir = fs::path(run_dir) / name;
  return fs::is_directory(dir) ? dir.string() : "";
}

std::string checkpoint_from_user_path(const std::string& user_path) {
  // "runs/x/step-000100/" as "runs/x/step-000100": its parent must be the run directory.
  fs::path p = fs::path(user_path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  const std::string path = p.string();
  if (!fs::exists(fs::path(path) / "latest") || fs::exists(fs::path(path) / "manifest.json"))
    return path;
  const std::string dir = latest_checkpoint(path);
  LOOM_CHECK(!dir.empty()) << path << " is a run directory whose `latest` names no checkpoint "
                           << "directory (name a step-NNNNNN directory instead)";
  return dir;
}

Json read_trainer_state(const CheckpointReader& ckpt) {
  return Json::parse(ckpt.read_text("trainer_state.json"), ckpt.dir() + "/trainer_state.json");
}

void verify_checkpoint(const std::string& dir) {
  const CheckpointReader ckpt(dir);
  LOOM_CHECK(ckpt.has_checksums()) << "checkpoint " << dir << " has no manifest.json";
  read_trainer_state(ckpt);
  for (const std::string& name : ckpt.names("")) ckpt.read_full(name);
}

std::string resume_checkpoint(const std::string& run_dir, Resume mode, dist::ProcessGroup& world) {
  if (mode == Resume::No) return "";
  if (mode == Resume::Latest) return latest_checkpoint(run_dir);
  // Newest first; rank 0 verifies and tells the others which one (-1: none).
  std::vector<std::string> dirs;
  if (fs::is_directory(run_dir))
    for (const auto& e : fs::directory_iterator(run_dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("step-", 0) == 0 && n.find(".tmp") == std::string::npos)
        dirs.push_back(e.path().string());
    }
  std::sort(dirs.rbegin(), dirs.rend());
  int64_t chosen = -1;
  if (world.rank() == 0) {
    for (size_t i = 0; i < dirs.size() && chosen < 0; ++i) {
      try {
        verify_checkpoint(dirs[i]);
        chosen = int64_t(i);
      } catch (const std::exception& e) {
        std::printf("resume: passing over damaged checkpoint %s: %s\n", dirs[i].c_str(), e.what());
        append_event(run_dir, "damaged_checkpoint",
                     Json::object({{"checkpoint", dirs[i]}, {"error", e.what()}}));
      }
    }
  }
  Tensor t = from_vector(std::vector<int64_t>{chosen}, {1});
  world.broadcast(t, 0)->wait();
  chosen = to_vector_i64(t)[0];
  return chosen < 0 ? "" : dirs[size_t(chosen)];
}

}  // namespace loom::train
