// The single-process side of dist/: ParallelDims validation and the group of one process
// (the multi-process tests are in tests/dist, run under mpirun).
#include <gtest/gtest.h>

#include "loom/dist/device_mesh.h"
#include "loom/dist/process_group.h"
#include "loom/ops/ops.h"

namespace loom::dist {
namespace {

TEST(ParallelDims, InfersTheMinusOneDegree) {
  ParallelDims d{2, 1, -1, 1, 2};
  const ParallelDims r = d.resolved(8);
  EXPECT_EQ(r.dp_shard, 2);
  EXPECT_EQ(r.dp(), 2);
  EXPECT_EQ(ParallelDims{}.resolved(5).dp_shard, 5);
}

TEST(ParallelDims, ErrorsListEveryDegree) {
  auto message = [](ParallelDims d, int64_t world) {
    try {
      d.resolved(world);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string wrong = message({1, 2, 2, 1, 1}, 8);
  EXPECT_NE(wrong.find("pp=1 dp_replicate=2 dp_shard=2 cp=1 tp=1 multiply to 4 but the world "
                       "has 8 processes"),
            std::string::npos)
      << wrong;
  const std::string indivisible = message({1, 1, -1, 1, 3}, 8);
  EXPECT_NE(indivisible.find("does not divide the world size 8"), std::string::npos) << indivisible;
  EXPECT_NE(message({1, -1, -1, 1, 1}, 4).find("at most one degree may be -1"), std::string::npos);
  EXPECT_NE(message({0, 1, 1, 1, 1}, 1).find("degrees must be >= 1"), std::string::npos);
}

TEST(SingleProcessGroup, CollectivesAreIdentities) {
  auto g = std::make_shared<SingleProcessGroup>("world");
  Tensor t = from_vector(std::vector<float>{1, -2, 3}, {3});
  g->all_reduce(t, ReduceOp::Avg)->wait();
  EXPECT_EQ(to_vector(t), (std::vector<float>{1, -2, 3}));
  Tensor out = Tensor::empty({3});
  g->all_gather(t, out)->wait();
  EXPECT_EQ(to_vector(out), to_vector(t));
  g->reduce_scatter(t, out, ReduceOp::Sum)->wait();
  EXPECT_EQ(to_vector(out), to_vector(t));
  EXPECT_THROW(g->send(t, 0, 0), Error);
  EXPECT_THROW(g->all_gather(t, Tensor::empty({4})), Error);
  DeviceMesh mesh(g, ParallelDims{});
  EXPECT_EQ(mesh.degree("dp"), 1);
  EXPECT_EQ(mesh.group("tp")->size(), 1);
  EXPECT_THROW(mesh.group("ep"), Error);
}

}  // namespace
}  // namespace loom::dist
