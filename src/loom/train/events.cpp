#include "loom/train/events.h"

#include <ctime>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
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

int64_t last_event_step(const std::string& run_dir, const std::string& event) {
  std::ifstream in(run_dir + "/events.jsonl");
  int64_t step = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"" + event + "\"") == std::string::npos) continue;
    try {  // a line cut by a crash is no event
      const Json e = Json::parse(line);
      if (e.contains("event") && e.at("event").as_string() == event && e.contains("step"))
        step = e.at("step").as_int();
    } catch (const Error&) {
    }
  }
  return step;
}

}  // namespace loom::train
