// Kernel scratch memory taken from the host allocator, so that temporary buffers inside
// kernels show up in the memory statistics (category Other) like every tensor does.
#pragma once
#include <cstddef>
#include <utility>

#include "loom/core/allocator.h"

namespace loom::cpu {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  explicit ScratchBuffer(size_t count) { resize(count); }
  ~ScratchBuffer() { release(); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ScratchBuffer(ScratchBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}

  void resize(size_t count) {  // contents are not preserved
    release();
    count_ = count;
    if (count_) {
      data_ = static_cast<float*>(
          host_allocator().allocate(count_ * sizeof(float), MemCategory::Other));
    }
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  void release() {
    if (data_) host_allocator().deallocate(data_, count_ * sizeof(float), MemCategory::Other);
    data_ = nullptr;
    count_ = 0;
  }
  float* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace loom::cpu
