#include "loom/dist/hosts.h"

#include <unistd.h>

#include <cstring>

#include "loom/core/error.h"
#include "loom/ops/creation.h"

namespace loom::dist {

namespace {
constexpr int64_t kWords = 8;  // a name travels as 8 i64 words, 63 bytes and a terminator
}

std::string this_host() {
  char name[kWords * 8] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::vector<std::string> gather_names(ProcessGroup& group, const std::string& mine) {
  LOOM_CHECK(mine.size() < kWords * 8) << "the name '" << mine << "' is longer than 63 bytes";
  std::vector<int64_t> words(kWords, 0);
  std::memcpy(words.data(), mine.data(), mine.size());
  Tensor out = Tensor::empty({kWords * group.size()}, DType::I64);
  group.all_gather(from_vector(words, {kWords}), out)->wait();
  const std::vector<int64_t> all = to_vector_i64(out);
  std::vector<std::string> names;
  for (int r = 0; r < group.size(); ++r) {
    char name[kWords * 8 + 1] = {};
    std::memcpy(name, all.data() + r * kWords, kWords * 8);
    names.emplace_back(name);
  }
  return names;
}

}  // namespace loom::dist
