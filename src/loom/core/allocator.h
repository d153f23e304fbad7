// Caching allocator with exact live/peak byte counts per memory category.
//
// Freed blocks are kept in per-size-class free lists and handed out again, so a training
// step that allocates the same shapes every time stops calling the system allocator after
// the first step. Statistics count the bytes requested (live) per category, and the bytes
// held from the system (reserved = live blocks rounded up to their size class + cached).
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "loom/core/device.h"

namespace loom {

enum class MemCategory : uint8_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Communication,
  Other,
};
constexpr int kNumMemCategories = 6;
const char* mem_category_name(MemCategory c);

struct MemStats {
  std::array<int64_t, kNumMemCategories> live{};  // bytes requested and not yet freed
  std::array<int64_t, kNumMemCategories> peak{};  // max of live since the last reset_peak()
  int64_t live_total = 0;
  int64_t peak_total = 0;
  int64_t reserved = 0;       // bytes obtained from the system and not returned
  int64_t cached = 0;         // part of `reserved` sitting in free lists
  int64_t system_allocs = 0;  // calls to the system allocator (steady state: no growth)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, MemCategory category) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, MemCategory category) = 0;
  // Moves `nbytes` of live accounting from one category to another (a tensor changes role).
  virtual void retag(size_t nbytes, MemCategory from, MemCategory to) = 0;
  virtual MemStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void empty_cache() = 0;  // returns cached blocks to the system
};

// Blocks cached by size class on top of a system allocator (the host's, or a device's): the
// accounting, caching, poisoning and limit every device shares.
class CachingAllocator : public Allocator {
 public:
  ~CachingAllocator() override = default;
  void* allocate(size_t nbytes, MemCategory category) override;
  void deallocate(void* ptr, size_t nbytes, MemCategory category) override;
  void retag(size_t nbytes, MemCategory from, MemCategory to) override;
  MemStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;

  static size_t size_class(size_t nbytes);  // the block size a request of nbytes gets
  // Debug aid for kernel tests: fill every new allocation with 0xFF bytes (NaN in every
  // float format), so an output element a kernel forgets to write shows up as NaN.
  void set_poison(bool on) { poison_ = on; }
  // At most this many bytes of live tensors (0: no limit), as on a device of that size: an
  // allocation beyond it is an error naming what it was for and what is live.
  void set_limit(int64_t bytes) { limit_ = bytes; }

 protected:
  // The system allocator underneath: nullptr when out of memory.
  virtual void* system_allocate(size_t nbytes) = 0;
  virtual void system_free(void* ptr) = 0;
  virtual void fill_bytes(void* ptr, int value, size_t nbytes) = 0;
  virtual const char* memory_name() const = 0;  // "host memory", "CUDA device memory"
  void release_all_cached();                     // derived destructors call this

 private:
  void count_live(MemCategory category, int64_t delta);  // caller holds mutex_
  void release_cached();                                 // caller holds mutex_
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_lists_;
  MemStats stats_;
  std::atomic<bool> poison_{false};
  std::atomic<int64_t> limit_{0};
};

// Host memory: 64-byte aligned blocks.
class CachingHostAllocator final : public CachingAllocator {
 public:
  ~CachingHostAllocator() override { release_all_cached(); }

 protected:
  void* system_allocate(size_t nbytes) override;
  void system_free(void* ptr) override;
  void fill_bytes(void* ptr, int value, size_t nbytes) override;
  const char* memory_name() const override { return "host memory"; }
};

// The process-wide host allocator (one of the two allowed pieces of global state).
CachingHostAllocator& host_allocator();

// The category new tensors are counted under on this thread, changed for a scope:
//   { MemCategoryScope scope(MemCategory::OptimizerState); ... allocate moments ... }
MemCategory current_mem_category();
class MemCategoryScope {
 public:
  explicit MemCategoryScope(MemCategory category);
  ~MemCategoryScope();
  MemCategoryScope(const MemCategoryScope&) = delete;
  MemCategoryScope& operator=(const MemCategoryScope&) = delete;

 private:
  MemCategory previous_;
};

}  // namespace loom

namespace loom {
// Allocators per device type. The host allocator is always registered; a device backend
// registers its own when it initialises.
Allocator& allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);
}  // namespace loom
