// Which settings a resumed run may change (docs/resilience.md). A run's config.toml is what its
// checkpoints were trained with, and `loom sample` / `eval` read them with it, so --resume
// compares the new settings with the recorded ones, key by key:
//  - may change: how the run is bounded, saved, logged, evaluated and sampled, how it is laid
//    out (a checkpoint reshards to any layout) and watched (run.memory_limit_mb, profile_steps,
//    tensorboard, threads; train.stop_after, max_minutes, ckpt_every, keep_checkpoints, log_every,
//    async_checkpoint, device, tf32; data.cache_dir; [eval], [sample], [parallel], [dist],
//    [resilience]);
//  - regroups: train.batch_size and train.grad_accum, when their product (the step's global
//    batch) is kept: every step draws the same samples (each keyed by its index in the step's
//    batch), split into other micro-batches -- what an elastic restart on fewer ranks does;
//  - extends: train.steps, where the learning rate so far does not depend on it: a constant
//    schedule, or warmup-stable-decay resumed before its decay began (and still before the new
//    decay) -- said in one line;
//  - must not change: everything else (the model, data, optimizer, schedule, batch, precision,
//    seed, mixture, DiLoCo): refused, listing every difference.
// A key only one of the two files has (a build older or newer than the run) is not compared.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace loom::train {

struct ResumeChanges {
  std::vector<std::string> refused;   // "model.heads: 2 -> 4", one per key
  std::vector<std::string> extended;  // "train.steps: 8 -> 12 (...)"
  std::string regrouped;              // the global batch kept in other micro-batches (or "")
};

// recorded_toml: the run's config.toml; resolved_toml: this run's settings (Config's
// resolved_toml); resume_step: the step the checkpoint holds.
ResumeChanges compare_for_resume(const std::string& recorded_toml, const std::string& resolved_toml,
                                 int64_t resume_step);

}  // namespace loom::train
