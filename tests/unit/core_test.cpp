// Tensor views, the caching allocator's statistics, and the layout-invariant Philox RNG.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>

#include "loom/ops/ops.h"

namespace {

using loom::DType;
using loom::MemCategory;
using loom::Tensor;

TEST(Tensor, ViewsShareStorageWithoutCopies) {
  std::vector<float> v(24);
  std::iota(v.begin(), v.end(), 0.0f);
  Tensor t = loom::from_vector(v, {2, 3, 4});
  Tensor p = loom::permute(t, {2, 0, 1});
  EXPECT_EQ(p.storage().get(), t.storage().get());
  EXPECT_EQ(p.shape(), (loom::Shape{4, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  Tensor n = loom::narrow(t, 2, 1, 2);
  EXPECT_EQ(n.storage().get(), t.storage().get());
  EXPECT_EQ(loom::to_vector(n), (std::vector<float>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
  Tensor e = loom::expand(loom::narrow(t, 0, 0, 1), {3, 3, 4});
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.storage().get(), t.storage().get());
  Tensor r = loom::reshape(t, {6, -1});
  EXPECT_EQ(r.storage().get(), t.storage().get());  // contiguous: a view
  Tensor rc = loom::reshape(p, {-1});               // not contiguous: a copy
  EXPECT_NE(rc.storage().get(), t.storage().get());
  EXPECT_EQ(loom::to_vector(rc)[1], 4.0f);  // p[0][0][1] = t[0][1][0]
  Tensor c = loom::contiguous(p);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(loom::to_vector(c), loom::to_vector(rc));
  // Writes through a view land in the base.
  loom::fill_(loom::narrow(t, 1, 0, 1), -1.0);
  EXPECT_EQ(loom::to_vector(t)[0], -1.0f);
  EXPECT_EQ(loom::to_vector(t)[12], -1.0f);
  EXPECT_EQ(loom::to_vector(t)[4], 4.0f);
}

TEST(Tensor, ReshapeOfAStridedTensorIsAViewWhenItsChunksAllowIt) {
  std::vector<float> v(36);
  std::iota(v.begin(), v.end(), 0.0f);
  Tensor t = loom::from_vector(v, {3, 12});
  // Columns [2, 10): rows of 8 contiguous values, 12 apart.
  Tensor slice = loom::narrow(t, 1, 2, 8);
  Tensor split = loom::reshape(slice, {3, 2, 4});  // splits the contiguous last dim: a view
  EXPECT_EQ(split.storage().get(), t.storage().get());
  EXPECT_EQ(split.strides(), (loom::Shape{12, 4, 1}));
  EXPECT_EQ(loom::to_vector(split), loom::to_vector(loom::contiguous(slice)));
  Tensor merged = loom::reshape(slice, {24});  // rows are 12 apart, not 8: needs a copy
  EXPECT_NE(merged.storage().get(), t.storage().get());
  EXPECT_EQ(loom::to_vector(merged), loom::to_vector(loom::contiguous(slice)));
  // A permutation of whole dims, with size-1 dims added: (4, 3) -> (4, 1, 3, 1) is a view.
  Tensor p = loom::transpose(loom::reshape(t, {3, 12}), 0, 1);
  Tensor p4 = loom::reshape(p, {12, 1, 3, 1});
  EXPECT_EQ(p4.storage().get(), t.storage().get());
  EXPECT_EQ(loom::to_vector(p4), loom::to_vector(loom::contiguous(p)));
  // Heads of a fused projection: (B, T, 3 * H * D) sliced, split into (B, T, H, D).
  Tensor qkv = loom::from_vector(std::vector<float>(2 * 5 * 24, 1.0f), {2, 5, 24});
  Tensor k = loom::reshape(loom::narrow(qkv, 2, 8, 8), {2, 5, 2, 4});
  EXPECT_EQ(k.storage().get(), qkv.storage().get());
  EXPECT_EQ(k.strides(), (loom::Shape{120, 24, 4, 1}));
}

TEST(Tensor, EmptyAndZeroDimEdgeCases) {
  // No rows, long rows (the path that cuts long rows into pieces for threads).
  Tensor e = loom::add(loom::zeros({0, 8192}), loom::zeros({8192}));
  EXPECT_EQ(e.shape(), (loom::Shape{0, 8192}));
  EXPECT_EQ(loom::exp(loom::narrow(loom::zeros({0, 10000}), 1, 0, 9000)).numel(), 0);
  // The sum of a 0-dim tensor is itself.
  Tensor s = loom::sum(loom::from_vector(std::vector<float>{3.5f}, {}));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(loom::item(s), 3.5f);
}

TEST(Tensor, AsStridedRefusesViewsOutsideTheStorage) {
  Tensor t = loom::zeros({4});
  EXPECT_THROW(t.as_strided({3}, {2}, 0), loom::Error);
  EXPECT_THROW(t.as_strided({2}, {1}, 3), loom::Error);
  EXPECT_NO_THROW(t.as_strided({2}, {2}, 1));
}

TEST(Allocator, StatisticsAreExactForAKnownSequence) {
  auto& a = loom::host_allocator();
  a.empty_cache();
  const auto before = a.stats();
  const int P = int(MemCategory::Parameters), G = int(MemCategory::Gradients),
            O = int(MemCategory::OptimizerState);
  a.reset_peak();
  {
    Tensor w = Tensor::empty({100}, DType::F32, loom::cpu_device(), MemCategory::Parameters);
    Tensor m = Tensor::empty({100, 2}, DType::F32, loom::cpu_device(), MemCategory::OptimizerState);
    auto s = a.stats();
    EXPECT_EQ(s.live[P] - before.live[P], 400);
    EXPECT_EQ(s.live[O] - before.live[O], 800);
    {
      Tensor g = Tensor::empty({50}, DType::BF16, loom::cpu_device(), MemCategory::Gradients);
      EXPECT_EQ(a.stats().live[G] - before.live[G], 100);
    }
    s = a.stats();
    EXPECT_EQ(s.live[G] - before.live[G], 0);
    EXPECT_EQ(s.peak[G] - before.live[G], 100);  // the peak remembers it
    // A retag moves the bytes between categories.
    w.storage()->set_category(MemCategory::Gradients);
    s = a.stats();
    EXPECT_EQ(s.live[P] - before.live[P], 0);
    EXPECT_EQ(s.live[G] - before.live[G], 400);
    EXPECT_EQ(s.peak[G] - before.live[G], 400);
  }
  auto s = a.stats();
  EXPECT_EQ(s.live_total, before.live_total);
  // Freed blocks stay cached: allocating the same sizes again needs no system call.
  const int64_t sys = s.system_allocs;
  {
    Tensor w = Tensor::empty({100}, DType::F32, loom::cpu_device(), MemCategory::Parameters);
    Tensor m = Tensor::empty({100, 2}, DType::F32, loom::cpu_device(), MemCategory::OptimizerState);
  }
  EXPECT_EQ(a.stats().system_allocs, sys);
  EXPECT_GT(a.stats().cached, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached, 0);
  EXPECT_EQ(a.stats().reserved, a.stats().live_total == 0 ? 0 : a.stats().reserved);
}

TEST(Allocator, CategoryScopeAppliesToNewTensors) {
  auto& a = loom::host_allocator();
  const int64_t before = a.stats().live[int(MemCategory::Communication)];
  {
    loom::MemCategoryScope scope(MemCategory::Communication);
    Tensor buf = Tensor::empty({256}, DType::F32);
    EXPECT_EQ(a.stats().live[int(MemCategory::Communication)] - before, 1024);
  }
  EXPECT_EQ(loom::current_mem_category(), MemCategory::Activations);
}

TEST(Allocator, SizeClassesBoundTheSlack) {
  for (size_t n : {1ul, 63ul, 64ul, 65ul, 4096ul, 4097ul, 100000ul, 1ul << 30}) {
    const size_t c = loom::CachingHostAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(double(c), double(n) * 1.25 + 64) << n;
  }
}

TEST(Philox, MatchesPublishedKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
  auto r = loom::philox4x32_10(0, 0, 0);
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  r = loom::philox4x32_10(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull);
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  r = loom::philox4x32_10(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull);
  EXPECT_EQ(r, (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, SlicesOfAFillEqualTheFillOfTheSlice) {
  const loom::RngKey key{1234, "init", "blocks.3.attn.qkv.weight"};
  Tensor full = Tensor::empty({8, 6});
  loom::fill_normal(full, key);
  const auto all = loom::to_vector(full);
  // Row shards (as FSDP/ZeRO shard flat parameters), via the global offset.
  for (int64_t rank = 0; rank < 4; ++rank) {
    Tensor shard = Tensor::empty({2, 6});
    loom::fill_normal(shard, key, rank * 12);
    const auto s = loom::to_vector(shard);
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(s[size_t(i)], all[size_t(rank * 12 + i)]);
  }
  // A column block (a tensor-parallel shard), via the N-D block form.
  Tensor block = Tensor::empty({8, 3});
  loom::fill_normal_block(block, key, {8, 6}, {0, 3});
  const auto b = loom::to_vector(block);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(b[size_t(r * 3 + c)], all[size_t(r * 6 + 3 + c)]);
  // Filling a non-contiguous view fills the same logical order.
  Tensor base = Tensor::empty({6, 8});
  Tensor view = loom::transpose(base, 0, 1);
  loom::fill_normal(view, key);
  EXPECT_EQ(loom::to_vector(view), all);
}

TEST(Philox, KeysGiveIndependentStreamsWithTheRightMoments) {
  Tensor a = loom::randn({20000}, loom::RngKey{7, "init", "a"});
  Tensor b = loom::randn({20000}, loom::RngKey{7, "init", "b"});
  Tensor c = loom::randn({20000}, loom::RngKey{8, "init", "a"});
  const auto va = loom::to_vector(a), vb = loom::to_vector(b), vc = loom::to_vector(c);
  EXPECT_NE(va, vb);
  EXPECT_NE(va, vc);
  double mean = 0, var = 0, cov = 0;
  for (size_t i = 0; i < va.size(); ++i) mean += va[i];
  mean /= double(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    var += (va[i] - mean) * (va[i] - mean);
    cov += (va[i] - mean) * vb[i];
  }
  var /= double(va.size());
  cov /= double(va.size());
  // 20000 samples: standard errors 0.007 (mean), 0.01 (variance), 0.007 (covariance).
  EXPECT_NEAR(mean, 0.0, 0.04);
  EXPECT_NEAR(var, 1.0, 0.05);
  EXPECT_NEAR(cov, 0.0, 0.04);
  Tensor u = Tensor::empty({10000});
  loom::fill_uniform(u, loom::RngKey{1, "noise", ""}, 0, -2.0f, 3.0f);
  for (float x : loom::to_vector(u)) {
    EXPECT_GE(x, -2.0f);
    EXPECT_LT(x, 3.0f);
  }
}

}  // namespace
