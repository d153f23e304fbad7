#include "loom/checkpoint/run_checkpoints.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;

namespace {
std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", (long long)step);
  return buf;
}

// The run a checkpoint directory's trainer_state.json names ("" when it cannot be read).
std::string run_of(const fs::path& dir) {
  try {
    std::ifstream in(dir / "trainer_state.json", std::ios::binary);
    if (!in) return "";
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const Json state = Json::parse(text, (dir / "trainer_state.json").string());
    return state.contains("run_id") ? state.at("run_id").as_string() : "";
  } catch (const std::exception&) {
    return "";
  }
}

// Makes room for this run's checkpoint at `dir`. Only a checkpoint of this run is deleted;
// anything else there (another run's, or one that cannot be read) is moved aside, never lost.
void make_room(const fs::path& dir, const std::string& run_id) {
  if (!fs::exists(dir)) return;
  if (!run_id.empty() && run_of(dir) == run_id) {
    fs::remove_all(dir);
    return;
  }
  fs::path aside;
  for (int n = 1; aside.empty() || fs::exists(aside); ++n)
    aside = dir.parent_path() / ("set-aside-" + dir.filename().string() + "-" + std::to_string(n));
  fs::rename(dir, aside);
  std::fprintf(stderr, "checkpoint: %s is not a checkpoint of run %s; moved to %s, not deleted\n",
               dir.c_str(), run_id.c_str(), aside.c_str());
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
    const std::string run_id = state.at("run_id").as_string();
    make_room(final_dir, run_id);
    fs::rename(tmp_dir, final_dir);
    sync_directory(run_dir);  // the rename itself survives a crash
    write_file_atomic((fs::path(run_dir) / "latest").string(), step_name(step) + "\n");
    // This run's other checkpoints: the newest keep - 1 before this step stay; any beyond it
    // belong to a line of training the run has left (it resumed from an earlier one).
    std::vector<CheckpointInfo> older;
    for (const CheckpointInfo& c : list_checkpoints(run_dir)) {
      if (!c.readable || c.run_id != run_id || c.dir == final_dir.string()) continue;
      if (c.step > step) {
        fs::remove_all(c.dir);
      } else {
        older.push_back(c);
      }
    }
    for (size_t i = 0; i + size_t(keep - 1) < older.size(); ++i) fs::remove_all(older[i].dir);
  }
  world.barrier()->wait();  // nobody reads or writes the next checkpoint before this one is in
  return final_dir.string();
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("step-", 0) != 0 || n.find(".tmp") != std::string::npos)
      continue;
    CheckpointInfo c;
    c.dir = e.path().string();
    try {
      std::ifstream in(c.dir + "/trainer_state.json", std::ios::binary);
      LOOM_CHECK(in) << "no trainer_state.json";
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      const Json state = Json::parse(text, c.dir + "/trainer_state.json");
      c.step = state.at("step").as_int();
      c.run_id = state.contains("run_id") ? state.at("run_id").as_string() : "";
      c.readable = true;
    } catch (const std::exception&) {
      c.step = std::atoll(n.c_str() + 5);  // a number, never compared as text
    }
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.step != b.step ? a.step < b.step : a.dir < b.dir;
  });
  return out;
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

}  // namespace loom
