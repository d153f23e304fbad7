#include "loom/train/checkpoint_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/ops/ops.h"
#include "loom/train/config.h"
#include "loom/train/events.h"
#include "loom/train/recipe.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

// What resuming needs of a checkpoint: every tensor the model of config.toml beside it has,
// in its exact shape, for the weights, both AdamW moments and (DiT) the EMA.
void check_contents(const CheckpointReader& ckpt, const std::string& dir, const Json& state) {
  const fs::path config = fs::path(dir).parent_path() / "config.toml";
  LOOM_CHECK(fs::exists(config)) << "checkpoint " << dir << ": no config.toml beside it (the "
                                 << "run directory's), so its model cannot be known";
  const Config cfg = load_config(config.string());
  const std::string kind = state.at("model_kind").as_string();
  LOOM_CHECK(kind == cfg.spec().name)
      << "checkpoint " << dir << " holds a " << kind << " model, but " << config.string() << " a "
      << cfg.spec().name;
  const std::unique_ptr<nn::Module> model = make_bare_model(cfg);
  std::vector<std::string> parts = {"model/", "optimizer/.exp_avg", "optimizer/.exp_avg_sq"};
  for (const std::string& state : cfg.spec().piece_states) parts.push_back(state + "/");
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

Config run_config_of(const std::string& ckpt_dir, std::optional<ModelKind> kind, const char* what) {
  const std::string found = checkpoint_model_kind(ckpt_dir);
  LOOM_CHECK(!kind || found == model_spec(*kind).name)
      << what << ": " << ckpt_dir << " is a checkpoint of a " << found << " model, not a "
      << model_spec(*kind).name;
  const fs::path config = fs::path(ckpt_dir).parent_path() / "config.toml";
  LOOM_CHECK(fs::exists(config)) << what << ": " << config.string()
                                 << " not found (expected beside the checkpoint directory)";
  Config cfg = load_config(config.string());
  LOOM_CHECK(cfg.spec().name == found)
      << what << ": the config beside " << ckpt_dir << " is of model.kind " << cfg.spec().name;
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

void check_output_path(const std::string& path, const char* flag) {
  LOOM_CHECK(!path.empty()) << flag << ": an empty path";
  const fs::path out = fs::weakly_canonical(fs::absolute(path));
  auto is_checkpoint = [](const fs::path& d) {
    return fs::is_directory(d) &&
           (fs::exists(d / "manifest.json") || fs::exists(d / "trainer_state.json"));
  };
  auto is_run_dir = [](const fs::path& d) {
    return fs::is_directory(d) && (fs::exists(d / "config.toml") || fs::exists(d / "latest"));
  };
  for (fs::path d = out; !d.empty(); d = d.parent_path()) {
    LOOM_CHECK(!is_checkpoint(d)) << flag << " " << path << ": " << d.string()
                                  << " is a checkpoint; write elsewhere (a checkpoint is changed "
                                     "only by the run that saved it)";
    if (d == d.parent_path()) break;
  }
  LOOM_CHECK(!is_run_dir(out)) << flag << " " << path
                               << " is a run directory; write elsewhere (a run's files are "
                                  "changed only by the run)";
  LOOM_CHECK(!(fs::exists(out) && is_run_dir(out.parent_path())))
      << flag << " " << path << " is one of the files of the run directory "
      << out.parent_path().string()
      << "; write to a new name (a run's files are changed only by the run)";
}

}  // namespace loom::train
