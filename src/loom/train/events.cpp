#include "loom/train/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::train {

void append_event(const std::string& run_dir, const std::string& event, Json fields) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  Json line = Json::object({{"time", when}, {"event", event}});
  for (const auto& [k, v] : fields.items()) line.set(k, v);
  const std::string text = line.dump() + "\n";
  std::filesystem::create_directories(run_dir);
  const std::string path = run_dir + "/events.jsonl";
  // One write() with O_APPEND: lines from several writers never interleave.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  LOOM_CHECK(fd >= 0) << "cannot open " << path << " for appending";
  const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  LOOM_CHECK(n == ssize_t(text.size())) << "cannot append to " << path;
}

}  // namespace loom::train
