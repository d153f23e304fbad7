// The staged device group (dist/staged_group.h) under mpirun on the emulated device: every
// collective and transfer on device tensors gives, bit for bit, what the host group gives on
// host copies of the same values (the staged group runs the host group's own call), results
// arrive only through wait(), transfers posted both ways before waiting do not deadlock, and
// host tensors pass straight to the host group.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loom/backend/backend.h"
#include "loom/dist/staged_group.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"

namespace loom::dist {
namespace {

const Device kCuda{DeviceType::CUDA, 0};

// Member r's values: differ by rank and element, not round numbers.
Tensor values_of(int r, int64_t n, DType dtype = DType::F32) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = float(std::sin(0.37 * double(i) + 1.3 * r) * (1 + r));
  Tensor t = from_vector(v, {n});
  return dtype == DType::F32 ? t : to_dtype(t, dtype);
}

Tensor on_device(const Tensor& host) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), kCuda);
  backend_for(kCuda).copy(host, d);
  return d;
}

Tensor on_host(const Tensor& device) {
  Tensor h = Tensor::empty(device.shape(), device.dtype(), cpu_device());
  backend_for(device.device()).copy(device, h);
  return h;
}

void expect_same(const Tensor& device, const Tensor& host, const char* what) {
  const Tensor got = on_host(device);
  ASSERT_EQ(got.shape(), host.shape()) << what;
  const std::vector<float> a = to_vector(to_dtype(got, DType::F32));
  const std::vector<float> b = to_vector(to_dtype(host, DType::F32));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << what << " element " << i;
}

TEST(StagedGroup, CollectivesOnDeviceTensorsMatchTheHostGroup) {
  auto host = world();
  auto staged = staged_device_group(host);
  const int P = host->size(), r = host->rank();
  const int64_t n = 6 * P + 3 * P;  // chunks of 9 per member
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      Tensor h = values_of(r, n, dtype), d = on_device(h);
      WorkPtr wd = staged->all_reduce(d, op);
      host->all_reduce(h, op)->wait();
      wd->wait();
      expect_same(d, h, "all_reduce");
    }
    Tensor in = values_of(r, n, dtype);
    Tensor out_h = Tensor::empty({n / P}, dtype), out_d = Tensor::empty({n / P}, dtype, kCuda);
    host->reduce_scatter(in, out_h, ReduceOp::Sum)->wait();
    staged->reduce_scatter(on_device(in), out_d, ReduceOp::Sum)->wait();
    expect_same(out_d, out_h, "reduce_scatter");

    Tensor chunk = values_of(r, 9, dtype);
    Tensor all_h = Tensor::empty({9 * P}, dtype), all_d = Tensor::empty({9 * P}, dtype, kCuda);
    host->all_gather(chunk, all_h)->wait();
    staged->all_gather(on_device(chunk), all_d)->wait();
    expect_same(all_d, all_h, "all_gather");

    Tensor b_h = values_of(r, 17, dtype), b_d = on_device(b_h);
    host->broadcast(b_h, P - 1)->wait();
    staged->broadcast(b_d, P - 1)->wait();
    expect_same(b_d, b_h, "broadcast");

    Tensor a_in = values_of(r, 4 * P, dtype);
    Tensor a_h = Tensor::empty({4 * P}, dtype), a_d = Tensor::empty({4 * P}, dtype, kCuda);
    host->all_to_all(a_in, a_h)->wait();
    staged->all_to_all(on_device(a_in), a_d)->wait();
    expect_same(a_d, a_h, "all_to_all");

    // Uneven counts: member r sends 1 + r + q values to member q.
    std::vector<int64_t> in_counts, out_counts;
    int64_t in_n = 0, out_n = 0;
    for (int q = 0; q < P; ++q) {
      in_counts.push_back(1 + r + q);
      out_counts.push_back(1 + q + r);
      in_n += in_counts.back();
      out_n += out_counts.back();
    }
    Tensor v_in = values_of(r, in_n, dtype);
    Tensor v_h = Tensor::empty({out_n}, dtype), v_d = Tensor::empty({out_n}, dtype, kCuda);
    host->all_to_all_v(v_in, in_counts, v_h, out_counts)->wait();
    staged->all_to_all_v(on_device(v_in), in_counts, v_d, out_counts)->wait();
    expect_same(v_d, v_h, "all_to_all_v");
  }
}

TEST(StagedGroup, ResultsArriveThroughWaitAndRingTransfersDoNotDeadlock) {
  auto staged = staged_device_group(world());
  const int P = staged->size(), r = staged->rank();
  ASSERT_GE(P, 2) << "run under mpirun with 2 or more processes (ctest: cuda.emulated_dist_np2)";
  // Each member sends to the next and receives from the previous, both posted before either
  // is waited for (ring attention's pattern).
  Tensor mine = on_device(values_of(r, 33)), got = on_device(values_of(-1, 33));
  const Tensor before = on_host(got);
  WorkPtr sent = staged->send(mine, (r + 1) % P, 7);
  WorkPtr received = staged->recv(got, (r + P - 1) % P, 7);
  sent->wait();
  // Not yet waited for: the device tensor still holds what it held.
  expect_same(got, before, "recv before wait");
  received->wait();
  expect_same(got, values_of((r + P - 1) % P, 33), "recv");
}

TEST(StagedGroup, HostTensorsGoStraightToTheHostGroup) {
  auto staged = staged_device_group(world());
  const int P = staged->size();
  Tensor t = from_vector(std::vector<float>{1.0f, 2.0f}, {2});
  staged->all_reduce(t, ReduceOp::Sum)->wait();
  EXPECT_EQ(to_vector(t), (std::vector<float>{float(P), 2.0f * float(P)}));
  // Split groups stage too.
  auto half = staged->split(staged->rank() % 2, staged->rank(), "half");
  Tensor d = on_device(values_of(staged->rank(), 5));
  half->all_reduce(d, ReduceOp::Sum)->wait();
  std::vector<float> sum(5, 0.0f);
  for (int q = staged->rank() % 2; q < P; q += 2) {
    const std::vector<float> v = to_vector(values_of(q, 5));
    for (size_t i = 0; i < 5; ++i) sum[i] += v[i];
  }
  const std::vector<float> got = to_vector(on_host(d));
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(got[i], sum[i], 1e-6f * (1 + std::fabs(sum[i])));
}

}  // namespace
}  // namespace loom::dist
