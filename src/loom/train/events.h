// runs/<name>/events.jsonl: what happened to a run besides its steps -- restarts and their
// causes, skipped steps, loss spikes, stragglers, damaged checkpoints passed over. One JSON
// object per line with "time" (UTC, ISO 8601) and "event"; appended whole, so the supervisor
// and the main rank can both write.
#pragma once
#include <string>

#include "loom/core/json.h"

namespace loom::train {

void append_event(const std::string& run_dir, const std::string& event,
                  Json fields = Json::object());
// The "step" of the last `event` in run_dir/events.jsonl; -1 if there is none (or no file).
int64_t last_event_step(const std::string& run_dir, const std::string& event);

}  // namespace loom::train
