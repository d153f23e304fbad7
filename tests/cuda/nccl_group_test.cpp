// The NCCL process group on one GPU (the device machine has one): a group of one member runs
// every call through NCCL, its stream, events and watcher thread, so the wiring (the unique id,
// the communicator, dtype widening, the Work handles, host tensors going to the host group) is
// checked where it can be. Results are compared with what the MPI backend promises for one
// member: every reduction is the identity, gathers and exchanges copy. Several members need
// several GPUs, which no machine here has.
#include <gtest/gtest.h>

#include "loom/dist/nccl_group.h"
#include "loom/ops/ops.h"

namespace {

using loom::Tensor;
using loom::dist::ReduceOp;

const loom::Device kCuda{loom::DeviceType::CUDA, 0};

// Made once and never destroyed: a communicator torn down after the CUDA runtime at exit
// could fail the process after every test passed.
std::shared_ptr<loom::dist::ProcessGroup> group() {
  static auto* g = new std::shared_ptr<loom::dist::ProcessGroup>(loom::dist::nccl_group(
      std::make_shared<loom::dist::SingleProcessGroup>("nccl_test"), /*timeout_s=*/60));
  return *g;
}

Tensor device_values(const std::vector<float>& v, loom::DType dtype) {
  return loom::from_vector(v, {int64_t(v.size())}, dtype, kCuda);
}

TEST(NcclGroup, ReductionsOfOneMemberAreTheIdentity) {
  ASSERT_TRUE(loom::dist::nccl_available());
  const std::vector<float> v = {1.5f, -2.25f, 3.0f, 1e-3f, 7.0f, -0.5f};
  for (loom::DType dtype : {loom::DType::F32, loom::DType::BF16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      // Written by a kernel just before the call: the call must wait for it.
      Tensor t = loom::mul_scalar(device_values(v, dtype), 2.0);
      group()->all_reduce(t, op)->wait();
      std::vector<float> expected = v;
      for (float& e : expected) e *= 2.0f;
      EXPECT_EQ(loom::to_vector(t), loom::to_vector(loom::from_vector(expected, {6}, dtype)))
          << loom::dtype_name(dtype) << " " << loom::dist::reduce_op_name(op);
    }
  Tensor i =
      loom::from_vector(std::vector<int64_t>{5, -7, 1LL << 40}, {3}, loom::DType::I64, kCuda);
  group()->all_reduce(i, ReduceOp::Max)->wait();
  EXPECT_EQ(loom::to_vector_i64(i), (std::vector<int64_t>{5, -7, 1LL << 40}));
}

TEST(NcclGroup, GathersScattersBroadcastsAndExchanges) {
  const std::vector<float> v = {1, 2, 3, 4};
  Tensor out = loom::zeros({4}, loom::DType::F32, kCuda);
  group()->all_gather(device_values(v, loom::DType::F32), out)->wait();
  EXPECT_EQ(loom::to_vector(out), v);
  Tensor part = loom::zeros({4}, loom::DType::BF16, kCuda);
  group()->reduce_scatter(device_values(v, loom::DType::BF16), part, ReduceOp::Sum)->wait();
  EXPECT_EQ(loom::to_vector(part), v);
  Tensor b = device_values(v, loom::DType::F32);
  group()->broadcast(b, 0)->wait();
  EXPECT_EQ(loom::to_vector(b), v);
  Tensor x = loom::zeros({4}, loom::DType::F32, kCuda);
  group()->all_to_all_v(device_values(v, loom::DType::F32), {4}, x, {4})->wait();
  EXPECT_EQ(loom::to_vector(x), v);
  Tensor y = loom::zeros({4}, loom::DType::F32, kCuda);
  group()->all_to_all(device_values(v, loom::DType::F32), y)->wait();
  EXPECT_EQ(loom::to_vector(y), v);
  group()->barrier()->wait();
}

TEST(NcclGroup, HostTensorsGoToTheHostGroupAndSplitsWork) {
  Tensor host = loom::from_vector(std::vector<float>{3, 4}, {2});
  group()->all_reduce(host, ReduceOp::Sum)->wait();
  EXPECT_EQ(loom::to_vector(host), (std::vector<float>{3, 4}));
  auto sub = group()->split(0, 0, "sub");
  Tensor t = device_values({1, 2}, loom::DType::F32);
  sub->all_reduce(t, ReduceOp::Sum)->wait();
  EXPECT_EQ(loom::to_vector(t), (std::vector<float>{1, 2}));
  try {
    group()->send(t, 0, /*tag=*/3)->wait();
    ADD_FAILURE() << "a tagged NCCL send was accepted";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("take no tags"), std::string::npos) << e.what();
  }
}

}  // namespace
