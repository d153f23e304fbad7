#include "loom/train/resume_rules.h"

#include <toml++/toml.h>

#include <map>
#include <sstream>

#include "loom/core/error.h"
#include "loom/optim/schedule.h"

namespace loom::train {

namespace {

using Flat = std::map<std::string, std::string>;  // "section.key" -> the value as TOML writes it

Flat flatten(const std::string& toml_text, const char* what) {
  toml::table table;
  try {
    table = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    LOOM_FAIL() << what << " is not valid TOML: " << e.description();
  }
  Flat flat;
  for (const auto& [section, node] : table) {
    const toml::table* keys = node.as_table();
    if (!keys) continue;
    for (const auto& [key, value] : *keys) {
      std::ostringstream os;
      value.visit([&os](const auto& v) { os << v; });
      flat[std::string(section.str()) + "." + std::string(key.str())] = os.str();
    }
  }
  return flat;
}

bool may_change(const std::string& key) {
  static const char* const sections[] = {"eval.", "sample.", "parallel.", "dist.", "resilience."};
  for (const char* s : sections)
    if (key.rfind(s, 0) == 0) return true;
  static const char* const keys[] = {
      "run.id",  // decided by the run directory, not by the settings
      "run.out_dir", "run.memory_limit_mb", "run.device_memory_limit_mb", "run.threads",
      "run.profile_steps", "run.tensorboard", "train.stop_after", "train.max_minutes",
      "train.ckpt_every", "train.keep_checkpoints", "train.log_every", "train.async_checkpoint",
      "train.device", "train.tf32",
      "optim.offload",        // where the moments live, not what
      "lowcomm.outer_state",  // where DiLoCo's outer state lives
      // worker m continues the checkpoint's worker m mod W
      "lowcomm.workers", "data.cache_dir"};
  for (const char* k : keys)
    if (key == k) return true;
  return false;
}

// The learning-rate schedule a flattened config describes, with `total` steps.
optim::LrSchedule schedule_of(const Flat& c, int64_t total) {
  auto get = [&c](const char* key) {
    const auto it = c.find(key);
    LOOM_CHECK(it != c.end()) << "the run's config.toml has no " << key;
    return it->second;
  };
  optim::LrSchedule s;
  std::string kind = get("optim.schedule");
  if (kind.size() >= 2 && (kind.front() == '\'' || kind.front() == '"'))
    kind = kind.substr(1, kind.size() - 2);
  s.kind = optim::schedule_kind_from_name(kind, "optim.schedule");
  s.lr = std::stod(get("optim.lr"));
  s.warmup_steps = std::stoll(get("optim.warmup_steps"));
  s.min_lr_ratio = std::stod(get("optim.min_lr_ratio"));
  s.decay_fraction = std::stod(get("optim.decay_fraction"));
  s.total_steps = total;
  return s;
}

// Whether every step taken so far had the same learning rate under either step count.
bool same_rates_so_far(const Flat& c, int64_t old_total, int64_t new_total, int64_t taken) {
  const optim::LrSchedule a = schedule_of(c, old_total), b = schedule_of(c, new_total);
  for (int64_t s = 0; s < taken; ++s)
    if (a.lr_at(s) != b.lr_at(s)) return false;
  return true;
}

}  // namespace

ResumeChanges compare_for_resume(const std::string& recorded_toml, const std::string& resolved_toml,
                                 int64_t resume_step) {
  const Flat before = flatten(recorded_toml, "the run's config.toml");
  const Flat now = flatten(resolved_toml, "this run's settings");
  ResumeChanges changes;
  // The step's batch may be regrouped into other micro-batches (an elastic restart on fewer
  // ranks accumulates more): each step still sees the same samples, in the same global order.
  auto product = [](const Flat& c) {
    const auto b = c.find("train.batch_size"), a = c.find("train.grad_accum");
    return b == c.end() || a == c.end() ? int64_t(-1)
                                        : std::stoll(b->second) * std::stoll(a->second);
  };
  const bool regrouped = product(before) > 0 && product(before) == product(now) &&
                         (before.at("train.batch_size") != now.at("train.batch_size"));
  if (regrouped)
    changes.regrouped = "the global batch of " + std::to_string(product(now)) +
                        " is kept: " + before.at("train.batch_size") + " x " +
                        before.at("train.grad_accum") + " -> " + now.at("train.batch_size") +
                        " x " + now.at("train.grad_accum") + " (batch_size x grad_accum)";
  for (const auto& [key, was] : before) {
    const auto it = now.find(key);
    if (it == now.end() || it->second == was || may_change(key)) continue;
    if (regrouped && (key == "train.batch_size" || key == "train.grad_accum")) continue;
    const std::string line = key + ": " + was + " -> " + it->second;
    if (key == "train.steps" &&
        same_rates_so_far(before, std::stoll(was), std::stoll(it->second), resume_step)) {
      changes.extended.push_back(line + " (the learning rates of the " +
                                 std::to_string(resume_step) + " steps taken stay as they were)");
    } else if (key == "train.steps") {
      changes.refused.push_back(line + " (the " + before.at("optim.schedule") +
                                " schedule would give the steps taken other learning rates)");
    } else {
      changes.refused.push_back(line);
    }
  }
  return changes;
}

}  // namespace loom::train
