#include "loom/core/tensor.h"

#include <ostream>
#include <sstream>

namespace loom {

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) {
  return os << shape_str(shape);
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Storage::Storage(size_t nbytes, Device device, MemCategory category)
    : data_(nullptr), nbytes_(nbytes), device_(device), category_(category) {
  data_ = allocator_for(device.type).allocate(nbytes, category);
}

Storage::Storage(size_t nbytes, Device device, MemCategory category, Unallocated)
    : data_(nullptr), nbytes_(nbytes), device_(device), category_(category) {}

Storage::~Storage() {
  if (data_) allocator_for(device_.type).deallocate(data_, nbytes_, category_);
}

void Storage::release() {
  if (!data_) return;
  allocator_for(device_.type).deallocate(data_, nbytes_, category_);
  data_ = nullptr;
}

void Storage::materialize() {
  if (!data_) data_ = allocator_for(device_.type).allocate(nbytes_, category_);
}

void Storage::released_error() const {
  LOOM_FAIL() << "use of released storage (" << nbytes_ << " bytes of "
              << mem_category_name(category_)
              << "): a ZeRO-3 parameter read outside the forward of its module (call the module "
                 "through Module::call), or a parameter read before parallelism gave it values "
                 "(nn::DeferInit)";
}

void Storage::set_category(MemCategory category) {
  allocator_for(device_.type).retag(nbytes_, category_, category);
  category_ = category;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, device, current_mem_category());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemCategory category) {
  for (int64_t s : shape) LOOM_CHECK(s >= 0) << "negative size in shape " << shape;
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage =
        std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device, category);
  } catch (const Error& e) {  // the limit or the machine: say which tensor wanted it
    std::ostringstream what;
    what << e.what() << " (a " << dtype_name(dtype) << " tensor of shape (";
    for (size_t i = 0; i < shape.size(); ++i) what << (i ? ", " : "") << shape[i];
    what << "))";
    throw Error(what.str());
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::unallocated(const Shape& shape, DType dtype, Device device, MemCategory category) {
  for (int64_t s : shape) LOOM_CHECK(s >= 0) << "negative size in shape " << shape;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device,
                                            category, Storage::Unallocated{});
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (impl().shape[i] == 1) continue;
    if (impl().strides[i] != expected) return false;
    expected *= impl().shape[i];
  }
  return true;
}

int64_t Tensor::wrap_dim(int64_t d) const {
  const int64_t n = int64_t(impl().shape.size());
  LOOM_CHECK(d >= -n && d < n) << "dim " << d << " out of range for a tensor of shape "
                               << impl().shape;
  return d < 0 ? d + n : d;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  LOOM_CHECK(shape.size() == strides.size())
      << "as_strided: shape " << shape << " and strides " << strides << " differ in rank";
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = this->impl().dtype;
  // Every element the view can reach must lie inside the storage.
  int64_t lo = offset, hi = offset;
  bool empty_view = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) empty_view = true;
    const int64_t reach = (shape[i] - 1) * strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t capacity = int64_t(impl->storage->nbytes() / dtype_size(impl->dtype));
  LOOM_CHECK(empty_view || (lo >= 0 && hi < capacity))
      << "as_strided: view " << shape << " strides " << strides << " offset " << offset
      << " reaches outside a storage of " << capacity << " elements";
  return Tensor(std::move(impl));
}

void Tensor::rebind_storage(const Tensor& view) const {
  LOOM_CHECK(is_leaf()) << "rebind_storage: only leaf tensors move to another storage";
  LOOM_CHECK(view.shape() == shape() && view.dtype() == dtype())
      << "rebind_storage: view of shape " << view.shape() << " " << dtype_name(view.dtype())
      << " for a tensor of shape " << shape() << " " << dtype_name(dtype());
  impl_->storage = view.impl().storage;
  impl_->strides = view.impl().strides;
  impl_->offset = view.impl().offset;
}

void Tensor::rebind_storage_and_shape(const Tensor& view) const {
  LOOM_CHECK(is_leaf() && !impl().grad)
      << "rebind_storage_and_shape: only leaves without a gradient";
  LOOM_CHECK(view.dtype() == dtype())
      << "rebind_storage_and_shape: dtype " << dtype_name(view.dtype()) << " for a tensor of "
      << dtype_name(dtype());
  impl_->shape = view.impl().shape;
  rebind_storage(view);
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = this->impl().shape;
  impl->strides = this->impl().strides;
  impl->offset = this->impl().offset;
  impl->dtype = this->impl().dtype;
  return Tensor(std::move(impl));
}

Tensor& Tensor::set_requires_grad(bool value) {
  LOOM_CHECK(is_leaf()) << "set_requires_grad: only leaf tensors can be marked; this one was "
                           "produced by an op (use detach() first)";
  LOOM_CHECK(!value || is_floating(dtype()))
      << "set_requires_grad: a " << dtype_name(dtype()) << " tensor cannot require gradients";
  impl().requires_grad = value;
  return *this;
}

void Tensor::set_grad_fn(std::shared_ptr<Node> node, uint32_t output_nr) const {
  impl().grad_fn = std::move(node);
  impl().output_nr = output_nr;
  impl().requires_grad = impl().grad_fn != nullptr;
}

void Tensor::add_post_accumulate_hook(TensorHook hook) const {
  LOOM_CHECK(is_leaf() && requires_grad())
      << "post-accumulate hooks go on leaf tensors that require grad";
  impl().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace loom
