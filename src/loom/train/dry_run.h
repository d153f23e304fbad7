// `loom train --dry-run`: what a run would be, before it is: the config resolved (what differs
// from the defaults), the mesh over the given number of processes and what each axis splits,
// and each pipeline rank's memory by category from the memory model (plan/memory_model.h),
// against the memory there is. Starts no processes, reads no data, writes nothing; the model
// is built but never initialised (its memory reserved, not touched).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/train/config.h"

namespace loom::train {

// The dry run's report of `config` (read from `config_path` with `overrides`) over `processes`
// processes (0: the product of the degrees the config sets, dp_shard 1 if left to fill).
// Throws, naming the keys, for a layout that cannot run on that many.
std::string dry_run_report(const std::string& config_path,
                           const std::vector<std::string>& overrides, int64_t processes);

}  // namespace loom::train
