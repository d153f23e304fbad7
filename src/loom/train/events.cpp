#include "loom/train/events.h"

#include <ctime>
#include <filesystem>

#include "loom/core/jsonl_file.h"

namespace loom::train {

void append_event(const std::string& run_dir, const std::string& event, Json fields) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  Json line = Json::object({{"time", when}, {"event", event}});
  for (const auto& [k, v] : fields.items()) line.set(k, v);
  std::filesystem::create_directories(run_dir);
  append_jsonl_record(run_dir + "/events.jsonl", line.dump());
}

}  // namespace loom::train
