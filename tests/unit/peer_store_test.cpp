// In-memory checkpoint copies (checkpoint/peer_store.h) in a world of one: where each rank's
// copy goes on several hosts, a save keeping only the newest committed step, a restore finding
// the newest copy of this rank's layout and returning its bytes, and a damaged copy passed over.
#include "loom/checkpoint/peer_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/dist/process_group.h"
#include "temp_dir_test.h"

namespace loom {
namespace {

TEST(PeerStore, EachRanksCopyGoesToAnotherHostWhereThePlacementAllows) {
  // Hosts in equal blocks: the same position on the next host.
  EXPECT_EQ(buddies_of({"a", "a", "b", "b"}), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(buddies_of({"a", "a", "b", "b", "c", "c"}), (std::vector<int>{2, 3, 4, 5, 0, 1}));
  // One host, alternating hosts, unequal blocks: the next rank (on another host where it is).
  EXPECT_EQ(buddies_of({"a", "a", "a"}), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(buddies_of({"a", "b", "a", "b"}), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(buddies_of({"a", "a", "a", "b"}), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(buddies_of({"a"}), (std::vector<int>{0}));
}

class PeerStoreFiles : public TempDirTest {
 protected:
  static Tensor bytes(int64_t n, uint8_t first) {
    Tensor t = Tensor::empty({n}, DType::U8);
    for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(t.data_ptr())[i] = uint8_t(first + i);
    return t;
  }
  static std::vector<uint8_t> values(const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    return {p, p + t.numel()};
  }
  static std::vector<uint8_t> values(const PeerStore::Payload& p) {
    const auto* b = reinterpret_cast<const uint8_t*>(p.data);
    return {b, b + p.size};
  }
  dist::SingleProcessGroup group_{"memory"};
};

TEST_F(PeerStoreFiles, KeepsTheNewestStepAndRestoresItsBytes) {
  PeerStore store(dir_.string(), "run1", group_, "host");
  store.save(5, 42, bytes(1000, 1));
  const Tensor newest = bytes(777, 9);
  store.save(10, 42, newest);
  const std::string own = (dir_ / "loom-run1" / "host").string();
  EXPECT_TRUE(std::filesystem::exists(own + "/own-00000-step-000010.bin"));
  EXPECT_FALSE(std::filesystem::exists(own + "/own-00000-step-000005.bin"));

  const PeerStore::Found found = store.find(42, 0);
  ASSERT_EQ(found.step, 10) << found.why_not;
  EXPECT_TRUE(found.from_buddy.empty());
  EXPECT_EQ(values(store.fetch(found)), values(newest));
  // Another layout, or a step the disk has newer: nothing.
  EXPECT_EQ(store.find(43, 0).step, -1);
  const PeerStore::Found older = store.find(42, 11);
  EXPECT_EQ(older.step, -1);
  EXPECT_NE(older.why_not.find("no copy of a step from 11 on"), std::string::npos) << older.why_not;

  store.forget();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "loom-run1"));
  EXPECT_EQ(store.find(42, 0).step, -1);
}

TEST_F(PeerStoreFiles, ADamagedCopyIsPassedOver) {
  PeerStore store(dir_.string(), "run1", group_, "host");
  store.save(10, 42, bytes(1000, 1));
  const std::string file = (dir_ / "loom-run1" / "host" / "own-00000-step-000010.bin").string();
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('\x7f');
  }
  const PeerStore::Found found = store.find(42, 0);
  EXPECT_EQ(found.step, -1);
  EXPECT_NE(found.why_not.find("no copy of a step"), std::string::npos) << found.why_not;
  // A copy cut short is passed over too.
  store.save(12, 42, bytes(1000, 1));
  std::filesystem::resize_file((dir_ / "loom-run1" / "host" / "own-00000-step-000012.bin").string(),
                               600);
  EXPECT_EQ(store.find(42, 0).step, -1);
}

}  // namespace
}  // namespace loom
