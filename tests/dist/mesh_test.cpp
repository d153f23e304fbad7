// DeviceMesh groups against the row-major layout computed here from first principles.
#include <gtest/gtest.h>

#include "loom/dist/device_mesh.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"

namespace loom::dist {
namespace {

// Every way to write P as pp * dp_replicate * dp_shard * cp * tp.
std::vector<ParallelDims> layouts(int64_t P) {
  std::vector<ParallelDims> out;
  for (int64_t a = 1; a <= P; ++a)
    for (int64_t b = 1; b <= P; ++b)
      for (int64_t c = 1; c <= P; ++c)
        for (int64_t d = 1; d <= P; ++d)
          if (P % (a * b * c * d) == 0) out.push_back({a, b, c, d, P / (a * b * c * d)});
  return out;
}

TEST(DeviceMesh, AxisGroupsMatchRowMajorLayout) {
  auto w = world();
  const int64_t P = w->size();
  for (const ParallelDims& dims : layouts(P)) {
    DeviceMesh mesh(w, dims);
    const int64_t deg[5] = {dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp};
    int64_t coord[5], rest = w->rank();
    for (int a = 4; a >= 0; --a) coord[a] = rest % deg[a], rest /= deg[a];
    auto rank_of = [&](const int64_t* c) {
      int64_t r = 0;
      for (int a = 0; a < 5; ++a) r = r * deg[a] + c[a];
      return int(r);
    };
    for (int a = 0; a < 5; ++a) {
      const std::string axis = DeviceMesh::kAxes[size_t(a)];
      auto g = mesh.group(axis);
      ASSERT_EQ(g->size(), deg[a]) << axis << " " << dims.str();
      EXPECT_EQ(mesh.coordinate(axis), coord[a]);
      EXPECT_EQ(g->rank(), coord[a]);
      std::vector<int> want;
      for (int64_t k = 0; k < deg[a]; ++k) {
        int64_t c[5];
        std::copy(coord, coord + 5, c);
        c[a] = k;
        want.push_back(rank_of(c));
      }
      EXPECT_EQ(g->world_ranks(), want) << axis << " " << dims.str();
      // The group really connects those ranks: the sum of their world ranks.
      Tensor t = full({1}, double(w->rank()));
      g->all_reduce(t, ReduceOp::Sum)->wait();
      int64_t want_sum = 0;
      for (int r : want) want_sum += r;
      EXPECT_EQ(int64_t(to_vector(t)[0]), want_sum) << axis << " " << dims.str();
    }
    auto dp = mesh.group("dp");
    EXPECT_EQ(dp->size(), dims.dp_replicate * dims.dp_shard);
    EXPECT_EQ(dp->rank(), coord[1] * deg[2] + coord[2]);
  }
}

TEST(DeviceMesh, WorldSizeMismatchIsAnError) {
  auto w = world();
  ParallelDims bad{1, 1, w->size() + 1, 1, 1};
  try {
    DeviceMesh mesh(w, bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("world has " + std::to_string(w->size())),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom::dist
