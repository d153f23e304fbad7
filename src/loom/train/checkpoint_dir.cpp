#include "loom/train/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/core/atomic_file.h"
#include "loom/ops/ops.h"
#include "loom/train/config.h"
#include "loom/train/events.h"
#include "loom/train/recipe.h"

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
    // This run's other checkpoints: the newest keep - 1 before this step stay; any beyond it
    // belong to a line of training the run has left (it resumed from an earlier one).
    const std::string run_id = state.at("run_id").as_string();
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

namespace {

// What resuming needs of a checkpoint: every tensor the model of config.toml beside it has,
// in its exact shape, for the weights, both AdamW moments and (DiT) the EMA.
void check_contents(const CheckpointReader& ckpt, const std::string& dir, const Json& state) {
  const fs::path config = fs::path(dir).parent_path() / "config.toml";
  LOOM_CHECK(fs::exists(config)) << "checkpoint " << dir << ": no config.toml beside it (the "
                                 << "run directory's), so its model cannot be known";
  const Config cfg = load_config(config.string());
  const std::string kind = state.at("model_kind").as_string();
  LOOM_CHECK(kind == cfg.model_kind)
      << "checkpoint " << dir << " holds a " << kind << " model, but " << config.string() << " a "
      << cfg.model_kind;
  const std::unique_ptr<nn::Module> model = make_bare_model(cfg);
  std::vector<std::string> parts = {"model/", "optimizer/.exp_avg", "optimizer/.exp_avg_sq"};
  for (const std::string& state : recipe_piece_states(kind)) parts.push_back(state + "/");
  for (const nn::NamedParameter& p : model->named_parameters())
    for (const std::string& part : parts) {
      const size_t slash = part.find('/') + 1;
      const std::string name = part.substr(0, slash) + p.name + part.substr(slash);
      LOOM_CHECK(ckpt.contains(name))
          << "checkpoint " << dir << " has no tensor " << name << " (resuming needs it)";
      LOOM_CHECK(ckpt.shape(name) == p.tensor.shape())
          << "checkpoint " << dir << ": tensor " << name << " has shape " << ckpt.shape(name)
          << ", the model of " << config.string() << " " << p.tensor.shape();
    }
}

}  // namespace

std::string checkpoint_model_kind(const std::string& ckpt_dir) {
  return read_trainer_state(CheckpointReader(ckpt_dir)).at("model_kind").as_string();
}

Config run_config_of(const std::string& ckpt_dir, const std::string& kind, const char* what) {
  const std::string found = checkpoint_model_kind(ckpt_dir);
  LOOM_CHECK(kind.empty() || found == kind)
      << what << ": " << ckpt_dir << " is a checkpoint of a " << found << " model, not a " << kind;
  const fs::path config = fs::path(ckpt_dir).parent_path() / "config.toml";
  LOOM_CHECK(fs::exists(config)) << what << ": " << config.string()
                                 << " not found (expected beside the checkpoint directory)";
  Config cfg = load_config(config.string());
  LOOM_CHECK(cfg.model_kind == found)
      << what << ": the config beside " << ckpt_dir << " is of model.kind " << cfg.model_kind;
  return cfg;
}

void verify_checkpoint(const std::string& dir) {
  const CheckpointReader ckpt(dir);
  LOOM_CHECK(ckpt.has_checksums()) << "checkpoint " << dir << " has no manifest.json";
  LOOM_CHECK(ckpt.manifest_checksummed())
      << "checkpoint " << dir << " has no manifest.xxh64 (its manifest cannot be checked)";
  const Json state = read_trainer_state(ckpt);
  state.at("step").as_int();
  state.at("optimizer_steps").as_int();
  check_contents(ckpt, dir, state);
  for (const std::string& name : ckpt.names("")) ckpt.read_full(name);
}

namespace {

// The newest checkpoint of the run that verify_checkpoint() passes, and whether the run has
// any checkpoint at all.
std::pair<std::string, bool> newest_verified(const std::string& run_dir,
                                             const std::string& run_id) {
  std::vector<CheckpointInfo> all = list_checkpoints(run_dir);
  bool any = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    // An unreadable one may be this run's, damaged: it is tried (and passed over) too.
    if (it->readable && it->run_id != run_id) continue;
    any = true;
    try {
      verify_checkpoint(it->dir);
      return {it->dir, true};
    } catch (const std::exception& e) {
      std::printf("resume: passing over damaged checkpoint %s: %s\n", it->dir.c_str(), e.what());
      append_event(run_dir, "damaged_checkpoint",
                   Json::object({{"checkpoint", it->dir}, {"error", e.what()}}));
    }
  }
  return {"", any};
}

}  // namespace

std::string choose_resume_checkpoint(const std::string& run_dir, const std::string& run_id,
                                     Resume mode) {
  if (mode == Resume::No) return "";
  if (mode == Resume::Latest) {
    std::string name, why;
    std::ifstream in(fs::path(run_dir) / "latest");
    if (!in) {
      why = "there is no `latest` file";
    } else if (!(in >> name) || name.rfind("step-", 0) != 0 ||
               name.find('/') != std::string::npos) {
      why = "`latest` does not name a checkpoint";
    } else {
      const std::string dir = (fs::path(run_dir) / name).string();
      for (const CheckpointInfo& c : list_checkpoints(run_dir))
        if (c.dir == dir && c.readable && c.run_id == run_id) return dir;
      why = "`latest` names " + name + ", which is not a readable checkpoint of this run";
    }
    std::printf("resume: %s in %s; using the newest verified checkpoint of the run instead\n",
                why.c_str(), run_dir.c_str());
    append_event(run_dir, "latest_unusable", Json::object({{"reason", why}}));
  }
  const auto [dir, any] = newest_verified(run_dir, run_id);
  LOOM_CHECK(!dir.empty() || !any)
      << "resume: no checkpoint of run " << run_id << " in " << run_dir
      << " passes verification (each damaged one is listed above); nothing was overwritten";
  return dir;
}

std::string newest_valid_checkpoint(const std::string& run_dir, const std::string& run_id,
                                    dist::ProcessGroup& world) {
  int64_t step = -1;
  if (world.rank() == 0) {
    const std::string dir = newest_verified(run_dir, run_id).first;
    for (const CheckpointInfo& c : list_checkpoints(run_dir))
      if (c.dir == dir) step = c.step;
  }
  Tensor t = from_vector(std::vector<int64_t>{step}, {1});
  world.broadcast(t, 0)->wait();
  step = to_vector_i64(t)[0];
  return step < 0 ? "" : checkpoint_dir_name(run_dir, step);
}

}  // namespace loom::train
