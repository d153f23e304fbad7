#include "loom/dist/device_mesh.h"

#include <sstream>

#include "loom/core/error.h"

namespace loom::dist {

std::string ParallelDims::str() const {
  std::ostringstream s;
  s << "pp=" << pp << " dp_replicate=" << dp_replicate << " dp_shard=" << dp_shard << " cp=" << cp
    << " tp=" << tp;
  return s.str();
}

ParallelDims ParallelDims::resolved(int64_t world_size) const {
  ParallelDims d = *this;
  int64_t* degrees[] = {&d.pp, &d.dp_replicate, &d.dp_shard, &d.cp, &d.tp};
  int64_t product = 1, inferred = 0;
  int64_t* infer = nullptr;
  for (int64_t* v : degrees) {
    LOOM_CHECK(*v >= 1 || *v == -1) << "parallel: degrees must be >= 1 or -1 (inferred), got "
                                    << str() << " for a world of " << world_size;
    if (*v == -1) {
      ++inferred;
      infer = v;
    } else {
      product *= *v;
    }
  }
  LOOM_CHECK(inferred <= 1) << "parallel: at most one degree may be -1, got " << str();
  if (infer) {
    LOOM_CHECK(world_size % product == 0)
        << "parallel: cannot infer the -1 degree: the others multiply to " << product
        << ", which does not divide the world size " << world_size << " (" << str() << ")";
    *infer = world_size / product;
    product = world_size;
  }
  LOOM_CHECK(product == world_size) << "parallel: degrees " << d.str() << " multiply to " << product
                                    << " but the world has " << world_size << " processes";
  return d;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, const ParallelDims& dims)
    : dims_(dims.resolved(world->size())), world_(std::move(world)) {
  degrees_ = {dims_.pp, dims_.dp_replicate, dims_.dp_shard, dims_.cp, dims_.tp};
  int64_t rest = world_->rank();
  for (int a = 4; a >= 0; --a) {
    coords_[size_t(a)] = rest % degrees_[size_t(a)];
    rest /= degrees_[size_t(a)];
  }
  // Color: this rank's coordinates with the axis (or axes) of the group left out.
  auto color_without = [&](std::initializer_list<int> skip) {
    int64_t color = 0;
    for (int a = 0; a < 5; ++a) {
      bool skipped = false;
      for (int s : skip) skipped |= s == a;
      if (!skipped) color = color * degrees_[size_t(a)] + coords_[size_t(a)];
    }
    return int(color);
  };
  for (int a = 0; a < 5; ++a)
    groups_[size_t(a)] =
        world_->split(color_without({a}), int(coords_[size_t(a)]), kAxes[size_t(a)]);
  const int dp_key = int(coords_[1] * degrees_[2] + coords_[2]);
  groups_[5] = world_->split(color_without({1, 2}), dp_key, "dp");
}

int DeviceMesh::axis_index(const std::string& axis) const {
  for (int a = 0; a < 5; ++a)
    if (axis == kAxes[size_t(a)]) return a;
  LOOM_CHECK(axis == "dp") << "device mesh: unknown axis \"" << axis
                           << "\" (expected pp, dp_replicate, dp_shard, cp, tp or dp)";
  return 5;
}

int64_t DeviceMesh::degree(const std::string& axis) const {
  const int a = axis_index(axis);
  return a == 5 ? dims_.dp() : degrees_[size_t(a)];
}

int64_t DeviceMesh::coordinate(const std::string& axis) const {
  const int a = axis_index(axis);
  return a == 5 ? coords_[1] * degrees_[2] + coords_[2] : coords_[size_t(a)];
}

std::shared_ptr<ProcessGroup> DeviceMesh::group(const std::string& axis) const {
  return groups_[size_t(axis_index(axis))];
}

}  // namespace loom::dist
