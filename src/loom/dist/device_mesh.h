// ParallelDims and DeviceMesh: the job's processes arranged on named axes.
//
// Axes, outermost first: pp, dp_replicate, dp_shard, cp, tp. World rank r sits at the
// row-major coordinate of r over the degrees (tp varies fastest, so tensor-parallel peers are
// neighbours, as they would be on one machine). Each axis has a process group of the ranks
// that differ only on it; "dp" is dp_replicate x dp_shard flattened (the data-parallel ranks).
#pragma once
#include <array>
#include <memory>
#include <string>

#include "loom/dist/process_group.h"

namespace loom::dist {

struct ParallelDims {
  int64_t pp = 1, dp_replicate = 1, dp_shard = -1, cp = 1, tp = 1;

  // Every degree >= 1 after filling the one -1 (at most one) so the product is world_size;
  // otherwise an error that lists every degree and the world size.
  ParallelDims resolved(int64_t world_size) const;
  int64_t dp() const { return dp_replicate * dp_shard; }
  std::string str() const;  // "pp=1 dp_replicate=1 dp_shard=4 cp=1 tp=1"
};

class DeviceMesh {
 public:
  static constexpr std::array<const char*, 5> kAxes = {"pp", "dp_replicate", "dp_shard", "cp",
                                                       "tp"};

  // Collective over `world`: splits it into one group per axis (and "dp").
  DeviceMesh(std::shared_ptr<ProcessGroup> world, const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  int64_t degree(const std::string& axis) const;
  int64_t coordinate(const std::string& axis) const;  // this rank's index on the axis
  std::shared_ptr<ProcessGroup> group(const std::string& axis) const;
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

 private:
  int axis_index(const std::string& axis) const;  // into kAxes; 5 for "dp"
  ParallelDims dims_;
  std::shared_ptr<ProcessGroup> world_;
  std::array<int64_t, 5> degrees_{}, coords_{};
  std::array<std::shared_ptr<ProcessGroup>, 6> groups_;  // kAxes, then "dp"
};

}  // namespace loom::dist
