#include "loom/parallel/topology.h"

#include <array>
#include <utility>

#include "loom/core/error.h"

namespace loom::parallel {

namespace {

// The one table per enum: its names in the config, in the enum's order.
constexpr std::array<const char*, 4> kDataParallel = {"ddp", "zero1", "zero2", "zero3"};
constexpr std::array<const char*, 3> kRecompute = {"none", "full", "selective"};
constexpr std::array<const char*, 3> kContextParallel = {"ring", "ulysses", "usp"};
constexpr std::array<const char*, 4> kSchedule = {"gpipe", "1f1b", "interleaved", "zb-h1"};

template <typename E, size_t N>
E from_name(const std::array<const char*, N>& names, const std::string& name,
            const std::string& what) {
  std::string known;
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return E(i);
    known += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(names[i]);
  }
  LOOM_FAIL() << what << " '" << name << "' (expected " << known << ")";
  return E(0);
}

}  // namespace

DataParallel data_parallel_from_name(const std::string& name, const std::string& what) {
  if (name == "fsdp") return DataParallel::Zero3;
  return from_name<DataParallel>(kDataParallel, name, what);
}
Recompute recompute_from_name(const std::string& name, const std::string& what) {
  return from_name<Recompute>(kRecompute, name, what);
}
ContextParallelKind context_parallel_from_name(const std::string& name, const std::string& what) {
  return from_name<ContextParallelKind>(kContextParallel, name, what);
}
ScheduleKind schedule_kind_from_name(const std::string& name, const std::string& what) {
  return from_name<ScheduleKind>(kSchedule, name, what);
}

const char* name_of(DataParallel kind) {
  return kDataParallel[size_t(kind)];
}
const char* name_of(ContextParallelKind kind) {
  return kContextParallel[size_t(kind)];
}
const char* name_of(ScheduleKind kind) {
  return kSchedule[size_t(kind)];
}

}  // namespace loom::parallel
