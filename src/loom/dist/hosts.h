// Which machine each rank runs on: the names the straggler and exclusion events report, and
// what places an in-memory checkpoint's copy on another machine (checkpoint/peer_store.h).
#pragma once
#include <string>
#include <vector>

#include "loom/dist/process_group.h"

namespace loom::dist {

// This machine's host name (at most 63 bytes).
std::string this_host();
// Collective over group: every member's `mine` (at most 63 bytes), by rank.
std::vector<std::string> gather_names(ProcessGroup& group, const std::string& mine);

}  // namespace loom::dist
