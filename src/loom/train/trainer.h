// The one training loop, for every model kind (its recipe, train/recipe.h, says what differs):
// the mesh, parallelize(), the optimizer built from the handle, resume, prefetching, the step
// (micro-batches with gradient accumulation, or the pipeline schedule), the step guard,
// profiling, logging, evaluation, checkpoints and stopping.
#pragma once
#include <string>

#include "loom/train/config.h"

namespace loom::train {

// Trains per `config` in config.run_dir() (opened by RunDirectory, train/run_directory.h):
// from step 0, or from the checkpoint resume_from. resuming (--resume): in-memory checkpoints
// (resilience.memory_checkpoint_every) newer than resume_from, if every rank finds its own,
// are restored instead.
void train(const Config& config, const std::string& resume_from, bool resuming = false);

// Refuses a run that cannot fit, before anything is built: plan::memory_lower_bound of one
// micro-step against run.memory_limit_mb, or the machine's memory. A lower bound, so it never
// refuses a run that could fit; the error names the sizes.
void check_fits_in_memory(const Config& config, int world_size);

}  // namespace loom::train
