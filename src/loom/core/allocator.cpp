#include "loom/core/allocator.h"

#include <cstdlib>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/trace.h"

namespace loom {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters:
      return "parameters";
    case MemCategory::Gradients:
      return "gradients";
    case MemCategory::OptimizerState:
      return "optimizer";
    case MemCategory::Activations:
      return "activations";
    case MemCategory::Communication:
      return "communication";
    case MemCategory::Other:
      return "other";
  }
  return "?";
}

size_t CachingAllocator::size_class(size_t nbytes) {
  // 64-byte granularity up to 4 KiB, then 8 classes per power of two (<= 12.5% slack).
  if (nbytes == 0) nbytes = 1;
  if (nbytes <= 4096) return (nbytes + 63) & ~size_t(63);
  int top = 63 - __builtin_clzll(nbytes - 1);  // 2^top < nbytes <= 2^(top+1)
  size_t step = size_t(1) << (top - 2);
  return (nbytes + step - 1) / step * step;
}

void* CachingHostAllocator::system_allocate(size_t nbytes) {
  return std::aligned_alloc(64, nbytes);
}
void CachingHostAllocator::system_free(void* ptr) {
  std::free(ptr);
}
void CachingHostAllocator::fill_bytes(void* ptr, int value, size_t nbytes) {
  std::memset(ptr, value, nbytes);
}

void CachingAllocator::release_all_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void CachingAllocator::count_live(MemCategory category, int64_t delta) {
  const int c = int(category);
  stats_.live[c] += delta;
  stats_.live_total += delta;
  if (stats_.live[c] > stats_.peak[c]) stats_.peak[c] = stats_.live[c];
  if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
  // The profiler's memory timeline: a sample on every change of at least 4 KiB.
  if (trace::recording() && (delta >= 4096 || delta <= -4096)) {
    static const char* const keys[kNumMemCategories] = {
        mem_category_name(MemCategory(0)), mem_category_name(MemCategory(1)),
        mem_category_name(MemCategory(2)), mem_category_name(MemCategory(3)),
        mem_category_name(MemCategory(4)), mem_category_name(MemCategory(5))};
    double mb[kNumMemCategories];
    for (int i = 0; i < kNumMemCategories; ++i) mb[i] = double(stats_.live[i]) / 1e6;
    trace::counter("memory (MB)", keys, mb, kNumMemCategories);
  }
}

void* CachingAllocator::allocate(size_t nbytes, MemCategory category) {
  const size_t block = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t limit = limit_;
  LOOM_CHECK(limit == 0 || stats_.live_total + int64_t(nbytes) <= limit)
      << "memory limit of " << limit / (1 << 20) << " MB exceeded: allocating " << nbytes
      << " bytes for " << mem_category_name(category) << " with " << stats_.live_total
      << " bytes live";
  void* ptr = nullptr;
  auto it = free_lists_.find(block);
  if (it != free_lists_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.cached -= int64_t(block);
  } else {
    ptr = system_allocate(block);
    if (!ptr) {
      release_cached();
      ptr = system_allocate(block);
    }
    LOOM_CHECK(ptr) << "out of " << memory_name() << " allocating " << nbytes << " bytes for "
                    << mem_category_name(category) << " (reserved " << stats_.reserved << " bytes)";
    stats_.reserved += int64_t(block);
    stats_.system_allocs++;
  }
  count_live(category, int64_t(nbytes));
  if (poison_) fill_bytes(ptr, 0xff, nbytes);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes, MemCategory category) {
  if (!ptr) return;
  const size_t block = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_lists_[block].push_back(ptr);
  stats_.cached += int64_t(block);
  count_live(category, -int64_t(nbytes));
}

void CachingAllocator::retag(size_t nbytes, MemCategory from, MemCategory to) {
  if (from == to) return;
  std::lock_guard<std::mutex> lock(mutex_);
  count_live(from, -int64_t(nbytes));
  count_live(to, int64_t(nbytes));
}

MemStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.live;
  stats_.peak_total = stats_.live_total;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void CachingAllocator::release_cached() {
  for (auto& [block, ptrs] : free_lists_) {
    for (void* p : ptrs) system_free(p);
    stats_.reserved -= int64_t(block) * int64_t(ptrs.size());
    stats_.cached -= int64_t(block) * int64_t(ptrs.size());
    ptrs.clear();
  }
}

CachingHostAllocator& host_allocator() {
  static CachingHostAllocator* allocator = new CachingHostAllocator();  // never destroyed:
  return *allocator;  // tensors in static storage may outlive main()
}

namespace {
thread_local MemCategory t_category = MemCategory::Activations;
}

MemCategory current_mem_category() {
  return t_category;
}
MemCategoryScope::MemCategoryScope(MemCategory category) : previous_(t_category) {
  t_category = category;
}
MemCategoryScope::~MemCategoryScope() {
  t_category = previous_;
}

}  // namespace loom

namespace loom {
namespace {
Allocator* g_allocators[2] = {nullptr, nullptr};
}
Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU) return host_allocator();
  Allocator* a = g_allocators[int(type)];
  LOOM_CHECK(a) << "no allocator for device type " << int(type)
                << ": Loom was built without that backend, or it is not initialised";
  return *a;
}
void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[int(type)] = allocator;
}
}  // namespace loom
