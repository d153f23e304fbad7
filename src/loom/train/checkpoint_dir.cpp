#include "loom/train/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/core/atomic_file.h"
#include "loom/checkpoint/json_file.h"
#include "loom/checkpoint/safetensors.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {
std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", (long long)step);
  return buf;
}
}  // namespace

std::string save_checkpoint(const std::string& run_dir, int64_t step,
                            const CheckpointContents& contents, int64_t keep) {
  const fs::path final_dir = fs::path(run_dir) / step_name(step);
  const fs::path tmp_dir = fs::path(run_dir) / (step_name(step) + ".tmp");
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);
  for (const auto& [file, tensors] : contents.files)
    save_safetensors((tmp_dir / (file + ".safetensors")).string(), tensors);
  write_file_atomic((tmp_dir / "trainer_state.json").string(), contents.state.dump(2) + "\n");
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
  for (size_t i = 0; i + size_t(keep) < dirs.size(); ++i) fs::remove_all(fs::path(run_dir) / dirs[i]);
  return final_dir.string();
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "latest");
  std::string name;
  if (!(in >> name)) return "";
  const fs::path dir = fs::path(run_dir) / name;
  return fs::is_directory(dir) ? dir.string() : "";
}

Json read_trainer_state(const std::string& ckpt_dir) {
  return read_json_file((fs::path(ckpt_dir) / "trainer_state.json").string());
}

std::map<std::string, Tensor> read_tensors(const std::string& ckpt_dir, const std::string& file) {
  return load_safetensors((fs::path(ckpt_dir) / (file + ".safetensors")).string()).by_name();
}

}  // namespace loom::train
