// Tensor: a cheap, shared handle to (storage, shape, strides, offset, dtype) plus autograd
// metadata. Copying a Tensor copies the handle; views share storage. The differentiable
// view functions (reshape, permute, narrow, ...) live in ops/shape.h; this file only holds
// the raw, non-differentiable building blocks.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/allocator.h"
#include "loom/core/device.h"
#include "loom/core/dtype.h"
#include "loom/core/error.h"

namespace loom {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "(2, 3, 4)"
std::ostream& operator<<(std::ostream& os, const Shape& shape);
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

struct Node;  // autograd/node.h: the backward function that produced a tensor

// A block of device memory, returned to its allocator when the last view goes away.
class Storage {
 public:
  Storage(size_t nbytes, Device device, MemCategory category);
  // A storage that has a size but no memory yet, as if released: materialize() allocates it.
  struct Unallocated {};
  Storage(size_t nbytes, Device device, MemCategory category, Unallocated);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const {
    if (!data_ && nbytes_ != 0) released_error();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  // Frees the memory but keeps the storage (and every view of it) alive; materialize() gets
  // new memory of the same size. ZeRO-3 frees gathered parameters this way between uses, even
  // while autograd still holds views of them. Touching released data is an error.
  void release();
  void materialize();
  bool released() const { return !data_ && nbytes_ != 0; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }
  void set_category(MemCategory category);  // re-counts the bytes under the new category

 private:
  [[noreturn]] void released_error() const;
  void* data_;
  size_t nbytes_;
  Device device_;
  MemCategory category_;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::F16;
}
template <>
constexpr DType dtype_of<f8e4m3>() {
  return DType::F8E4M3;
}
template <>
constexpr DType dtype_of<f8e5m2>() {
  return DType::F8E5M2;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::I64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::U8;
}

class Tensor;
using TensorHook = std::function<void(const Tensor&)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::vector<TensorHook> post_accumulate_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous tensor, counted under `category` (default: the thread's current).
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = cpu_device());
  static Tensor empty(const Shape& shape, DType dtype, Device device, MemCategory category);
  // A shape without memory (its storage released from the start): a parameter that has no
  // values yet because parallelism will decide which of its elements this process holds
  // (nn::DeferInit). Reading it is an error; storage()->materialize() gives it memory.
  static Tensor unallocated(const Shape& shape, DType dtype, Device device, MemCategory category);
  bool allocated() const { return !impl().storage->released(); }

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const { return impl().shape[wrap_dim(d)]; }
  int64_t stride(int64_t d) const { return impl().strides[wrap_dim(d)]; }
  int64_t offset() const { return impl().offset; }
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(impl().dtype); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_contiguous() const;
  // Normalises a possibly negative dim into [0, dim()); throws naming the range otherwise.
  int64_t wrap_dim(int64_t d) const;

  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // The address of the first element, for host code: a device tensor is refused (named), so a
  // host read of device memory is an error here rather than a crash (or, under the emulated
  // CUDA backend, a silent success).
  void* data_ptr() const {
    LOOM_CHECK(device().type == DeviceType::CPU)
        << "host code read a tensor on " << device().str() << " " << shape()
        << " (copy it to the host first: to_device(t, cpu_device()))";
    return raw_ptr();
  }
  // The same address on any device: for the device's own backend.
  void* raw_ptr() const {
    return static_cast<char*>(impl().storage->data()) +
           impl().offset * int64_t(dtype_size(dtype()));
  }
  template <typename T>
  T* data() const {
    LOOM_CHECK(dtype_of<T>() == dtype())
        << "tensor of dtype " << dtype_name(dtype()) << " read as " << dtype_name(dtype_of<T>());
    return static_cast<T*>(data_ptr());
  }

  // A view of the same storage with other geometry. No autograd edge: ops/shape.h adds it.
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // Same storage and geometry, cut from the graph.
  Tensor detach() const;
  // Makes this tensor (a leaf) use `view`'s storage and geometry from now on, keeping its
  // identity and autograd metadata: how a parameter moves into a flat buffer (FSDP/ZeRO).
  void rebind_storage(const Tensor& view) const;
  // The same, and the shape may change too: how tensor parallelism shrinks a parameter to
  // this rank's part of it before anything has used it.
  void rebind_storage_and_shape(const Tensor& view) const;

  // --- autograd metadata (the engine lives in autograd/) ---
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool value);  // leaves only
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& grad) const { impl_->grad = grad.impl_; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  uint32_t output_nr() const { return impl().output_nr; }
  void set_grad_fn(std::shared_ptr<Node> node, uint32_t output_nr) const;
  // Called after a gradient has been accumulated into this leaf's .grad (DDP/FSDP hook here).
  void add_post_accumulate_hook(TensorHook hook) const;
  const std::vector<TensorHook>& post_accumulate_hooks() const {
    return impl().post_accumulate_hooks;
  }

  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  TensorImpl& impl() const {
    LOOM_CHECK(impl_) << "use of an undefined tensor";
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace loom
