// Every collective against a reference each rank computes on its own in double precision
// (what every member contributed is a known function of its rank).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/dtype.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"

namespace loom::dist {
namespace {

// Member r's contribution at element i: a value that differs by rank and element.
double value(int r, int64_t i) {
  return std::sin(0.37 * double(i) + 1.3 * r) * (1 + r) + 0.01 * i;
}

Tensor f32_of(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(value(r, i));
  return from_vector(v, {n});
}

TEST(Collectives, AllReduceF32SumAvgMax) {
  auto w = world();
  const int P = w->size();
  const int64_t n = 1000;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    Tensor t = f32_of(w->rank(), n);
    w->all_reduce(t, op)->wait();
    const std::vector<float> got = to_vector(t);
    for (int64_t i = 0; i < n; ++i) {
      double want = op == ReduceOp::Max ? -1e300 : 0.0;
      for (int r = 0; r < P; ++r)
        want = op == ReduceOp::Max ? std::max(want, double(float(value(r, i))))
                                   : want + double(float(value(r, i)));
      if (op == ReduceOp::Avg) want /= P;
      ASSERT_NEAR(got[size_t(i)], want, 1e-5 * (1 + std::abs(want)))
          << reduce_op_name(op) << " element " << i;
    }
  }
}

TEST(Collectives, AllReduceBf16ReducesInF32) {
  auto w = world();
  const int P = w->size();
  // 256 + small terms: summed in bf16 the small terms would be lost, in f32 they are kept.
  const int64_t n = 64;
  Tensor t = Tensor::empty({n}, DType::BF16);
  for (int64_t i = 0; i < n; ++i)
    t.data<bf16>()[i] = to_bf16(w->rank() == 0 ? 256.0f : 1.0f + float(i % 4));
  w->all_reduce(t, ReduceOp::Sum)->wait();
  for (int64_t i = 0; i < n; ++i) {
    const float want = to_f32(to_bf16(256.0f + float(P - 1) * (1.0f + float(i % 4))));
    EXPECT_EQ(to_f32(t.data<bf16>()[i]), want) << "element " << i;
  }
}

TEST(Collectives, AllReduceI64IsExact) {
  auto w = world();
  const int P = w->size();
  std::vector<int64_t> v(100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (int64_t(1) << 40) + int64_t(i) * (w->rank() + 1);
  Tensor t = from_vector(v, {100});
  w->all_reduce(t, ReduceOp::Sum)->wait();
  const int64_t* got = t.data<int64_t>();
  for (int64_t i = 0; i < 100; ++i)
    EXPECT_EQ(got[i], P * (int64_t(1) << 40) + i * P * (P + 1) / 2) << "element " << i;
  EXPECT_THROW(w->all_reduce(t, ReduceOp::Avg), Error);
}

TEST(Collectives, ReduceScatterGivesEachMemberItsChunk) {
  auto w = world();
  const int P = w->size();
  const int64_t chunk = 37;
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor in = to_dtype(f32_of(w->rank(), chunk * P), dt);
    Tensor out = Tensor::empty({chunk}, dt);
    w->reduce_scatter(in, out, ReduceOp::Avg)->wait();
    const std::vector<float> got = to_vector(to_dtype(out, DType::F32));
    for (int64_t i = 0; i < chunk; ++i) {
      double want = 0;
      const int64_t g = w->rank() * chunk + i;
      for (int r = 0; r < P; ++r)
        want += dt == DType::F32 ? double(float(value(r, g)))
                                 : double(to_f32(to_bf16(float(value(r, g)))));
      want /= P;
      const double tol = dt == DType::F32 ? 1e-5 : 8e-3;
      EXPECT_NEAR(got[size_t(i)], want, tol * (1 + std::abs(want))) << dtype_name(dt) << " " << i;
    }
  }
}

TEST(Collectives, AllGatherConcatenatesInRankOrder) {
  auto w = world();
  const int P = w->size();
  const int64_t n = 11;
  for (DType dt : {DType::F32, DType::BF16, DType::I64}) {
    Tensor in = to_dtype(f32_of(w->rank(), n), dt);
    Tensor out = Tensor::empty({P * n}, dt);
    w->all_gather(in, out)->wait();
    const std::vector<float> got = to_vector(to_dtype(out, DType::F32));
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> mine = to_vector(to_dtype(to_dtype(f32_of(r, n), dt), DType::F32));
        ASSERT_EQ(got[size_t(r * n + i)], mine[size_t(i)]) << dtype_name(dt) << " rank " << r;
      }
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  auto w = world();
  for (int root = 0; root < w->size(); ++root) {
    Tensor t = f32_of(w->rank(), 50);
    w->broadcast(t, root)->wait();
    EXPECT_EQ(to_vector(t), to_vector(f32_of(root, 50))) << "root " << root;
  }
}

TEST(Collectives, AllToAllTransposesChunks) {
  auto w = world();
  const int P = w->size(), me = w->rank();
  const int64_t c = 5;
  std::vector<int64_t> send(size_t(P * c));
  for (int dst = 0; dst < P; ++dst)
    for (int64_t i = 0; i < c; ++i) send[size_t(dst * c + i)] = 1000 * me + 10 * dst + i;
  Tensor in = from_vector(send, {P * c}), out = Tensor::empty({P * c}, DType::I64);
  w->all_to_all(in, out)->wait();
  for (int src = 0; src < P; ++src)
    for (int64_t i = 0; i < c; ++i)
      EXPECT_EQ(out.data<int64_t>()[src * c + i], 1000 * src + 10 * me + i);
}

TEST(Collectives, AllToAllVWithUnequalCounts) {
  auto w = world();
  const int P = w->size(), me = w->rank();
  // Member s sends (s + d) % 3 elements to member d.
  auto count = [](int s, int d) { return int64_t((s + d) % 3); };
  std::vector<int64_t> in_counts, out_counts, send;
  for (int d = 0; d < P; ++d) {
    in_counts.push_back(count(me, d));
    for (int64_t i = 0; i < count(me, d); ++i) send.push_back(100 * me + 10 * d + i);
    out_counts.push_back(count(d, me));
  }
  int64_t total_out = 0;
  for (int64_t c : out_counts) total_out += c;
  Tensor in = from_vector(send.empty() ? std::vector<int64_t>{0} : send,
                          {std::max<int64_t>(1, int64_t(send.size()))});
  Tensor out = Tensor::empty({std::max<int64_t>(1, total_out)}, DType::I64);
  w->all_to_all_v(in, in_counts, out, out_counts)->wait();
  int64_t at = 0;
  for (int s = 0; s < P; ++s)
    for (int64_t i = 0; i < count(s, me); ++i)
      EXPECT_EQ(out.data<int64_t>()[at++], 100 * s + 10 * me + i);
}

TEST(Collectives, SendRecvAroundTheRing) {
  auto w = world();
  const int P = w->size(), me = w->rank();
  Tensor out = f32_of(me, 20), in = Tensor::empty({20});
  if (P == 1) {  // no peer: a transfer to oneself is an error, not a hang
    EXPECT_THROW(w->send(out, 0, 7), Error);
    return;
  }
  auto r = w->recv(in, (me + P - 1) % P, 7);
  auto s = w->send(out, (me + 1) % P, 7);
  s->wait();
  r->wait();
  EXPECT_EQ(to_vector(in), to_vector(f32_of((me + P - 1) % P, 20)));
}

TEST(Collectives, ManyInFlightWaitedInReverse) {
  auto w = world();
  const int P = w->size();
  std::vector<Tensor> ts;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 16; ++k) {
    ts.push_back(full({257}, double(k + w->rank())));
    works.push_back(w->all_reduce(ts.back(), ReduceOp::Sum));
  }
  for (int k = 15; k >= 0; --k) {
    works[size_t(k)]->wait();
    EXPECT_EQ(to_vector(ts[size_t(k)])[0], float(P * k + P * (P - 1) / 2)) << "all_reduce " << k;
  }
  w->barrier()->wait();
}

TEST(Collectives, BytesMoveAsU8) {
  auto w = world();
  const int P = w->size();
  const int64_t c = 13;  // an odd chunk: no alignment to lean on
  Tensor mine = Tensor::empty({c}, DType::U8);
  for (int64_t i = 0; i < c; ++i) mine.data<uint8_t>()[i] = uint8_t(31 * w->rank() + 7 * i + 250);
  Tensor all = Tensor::empty({P * c}, DType::U8);
  w->all_gather(mine, all)->wait();
  for (int r = 0; r < P; ++r)
    for (int64_t i = 0; i < c; ++i)
      ASSERT_EQ(all.data<uint8_t>()[r * c + i], uint8_t(31 * r + 7 * i + 250)) << r << " " << i;
}

// The wire bytes of each call, counted as the bandwidth-optimal algorithm sends them: the
// formulas of process_group.h, computed here from the sizes alone.
TEST(Collectives, CountsTheBytesEachCallSends) {
  auto w = world();
  const double P = w->size(), n = 1200;  // divisible by 1..4
  auto sent_by = [&](auto call) {
    const int64_t before = bytes_sent();
    call();
    return double(bytes_sent() - before);
  };
  const double share = P > 1 ? (P - 1) / P : 0;
  EXPECT_NEAR(sent_by([&] { w->all_reduce(Tensor::empty({int64_t(n)}), ReduceOp::Sum)->wait(); }),
              2 * share * 4 * n, 1);
  EXPECT_NEAR(sent_by([&] {
                w->all_gather(Tensor::empty({int64_t(n)}, DType::U8),
                              Tensor::empty({int64_t(n * P)}, DType::U8))
                    ->wait();
              }),
              P > 1 ? (P - 1) * n : 0, 1);
  EXPECT_NEAR(sent_by([&] {
                w->all_to_all(Tensor::empty({int64_t(n)}), Tensor::empty({int64_t(n)}))->wait();
              }),
              share * 4 * n, 1);
}

TEST(Collectives, BadArgumentsAreErrorsNotHangs) {
  auto w = world();
  Tensor odd = Tensor::empty({w->size() * 3 + 1});
  EXPECT_THROW(w->reduce_scatter(odd, Tensor::empty({3}), ReduceOp::Sum), Error);
  EXPECT_THROW(w->broadcast(Tensor::empty({3}), w->size()), Error);
  EXPECT_THROW(w->all_reduce(Tensor::empty({3}, DType::U8), ReduceOp::Sum), Error);
  Tensor strided = transpose(Tensor::empty({3, 4}), 0, 1);
  EXPECT_THROW(w->all_reduce(strided, ReduceOp::Sum), Error);
}

}  // namespace
}  // namespace loom::dist
