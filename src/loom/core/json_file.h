// JSON files on disk (trainer_state.json, manifests): reading names the file in every parse
// error, writing is atomic (see atomic_file.h).
#pragma once
#include <string>

#include "loom/core/json.h"

namespace loom {

Json read_json_file(const std::string& path);
// Pretty-printed (indent 2) with a trailing newline, so the files read well and diff cleanly.
void write_json_file(const std::string& path, const Json& value, int indent = 2);

}  // namespace loom
