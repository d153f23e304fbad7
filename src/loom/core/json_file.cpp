#include "loom/core/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "loom/core/atomic_file.h"
#include "loom/core/error.h"

namespace loom {

Json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in) << "cannot read JSON file '" << path << "': " << std::strerror(errno);
  std::ostringstream text;
  text << in.rdbuf();
  LOOM_CHECK(!in.bad()) << "reading JSON file '" << path << "' failed";
  return Json::parse(text.str(), "'" + path + "'");
}

void write_json_file(const std::string& path, const Json& value, int indent) {
  // dump() runs first: a value it cannot print (NaN) must not leave a temp file behind.
  write_file_atomic(path, value.dump(indent) + "\n");
}

}  // namespace loom
