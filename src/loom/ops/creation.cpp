#include "loom/ops/creation.h"

#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  backend_for(device).fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Tensor ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), t.dtype(), t.device());
}

Tensor arange(int64_t n, DType dtype, Device device) {
  std::vector<int64_t> values(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = i;
  return from_vector(values, {n}, dtype, device);
}

Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype,
                   Device device) {
  LOOM_CHECK(int64_t(values.size()) == shape_numel(shape))
      << "from_vector: " << values.size() << " values for shape " << shape;
  Tensor host = Tensor::empty(shape, DType::F32, cpu_device());
  std::copy(values.begin(), values.end(), host.data<float>());
  if (dtype == DType::F32 && device == cpu_device()) return host;
  Tensor out = Tensor::empty(shape, dtype, device);
  backend_for(device).copy(host, out);
  return out;
}

Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype,
                   Device device) {
  LOOM_CHECK(int64_t(values.size()) == shape_numel(shape))
      << "from_vector: " << values.size() << " values for shape " << shape;
  Tensor host = Tensor::empty(shape, DType::I64, cpu_device());
  std::copy(values.begin(), values.end(), host.data<int64_t>());
  if (dtype == DType::I64 && device == cpu_device()) return host;
  Tensor out = Tensor::empty(shape, dtype, device);
  backend_for(device).copy(host, out);
  return out;
}

namespace {
template <typename T>
std::vector<T> to_host_vector(const Tensor& t, DType as) {
  Tensor host = Tensor::empty(t.shape(), as, cpu_device());
  backend_of(t).copy(t, host);
  const T* p = static_cast<const T*>(host.data_ptr());
  return std::vector<T>(p, p + host.numel());
}
}  // namespace

std::vector<float> to_vector(const Tensor& t) {
  return to_host_vector<float>(t, DType::F32);
}
std::vector<int64_t> to_vector_i64(const Tensor& t) {
  return to_host_vector<int64_t>(t, DType::I64);
}
std::vector<double> to_vector_f64(const Tensor& t) {
  std::vector<float> f = to_vector(t);
  return std::vector<double>(f.begin(), f.end());
}

float item(const Tensor& t) {
  LOOM_CHECK(t.numel() == 1) << "item: tensor of shape " << t.shape() << " has " << t.numel()
                             << " elements, expected 1";
  return to_vector(t)[0];
}

namespace {
struct ToDtypeBackward : Node {
  DType input_dtype;
  const char* name() const override { return "ToDtypeBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {to_dtype(g[0], input_dtype)};
  }
};
}  // namespace

Tensor to_dtype(const Tensor& t, DType dtype) {
  detail::check_defined("to_dtype", t, "input");
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  backend_of(t).copy(t, out);
  if (is_floating(dtype) && any_requires_grad({t})) {
    auto node = std::make_shared<ToDtypeBackward>();
    node->input_dtype = t.dtype();
    record(node, {t}, {out});
  }
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  detail::check_defined("to_device", t, "input");
  return detail::raw_to_device(t, device);
}

void copy_(const Tensor& dst, const Tensor& src) {
  LOOM_CHECK(dst.shape() == src.shape())
      << "copy_: destination " << dst.shape() << " and source " << src.shape() << " differ";
  LOOM_CHECK(!(grad_mode_enabled() && dst.requires_grad()))
      << "copy_: in-place write into a tensor that requires grad (wrap it in a NoGradGuard)";
  // Between the host and a device, the device side's backend knows both kinds of memory.
  backend_of(dst.device().type == DeviceType::CPU ? src : dst).copy(src, dst);
}

void fill_(const Tensor& dst, double value) {
  if (dst.is_contiguous()) {
    backend_of(dst).fill(dst, value);
  } else {
    copy_(dst, full(dst.shape(), value, dst.dtype(), dst.device()));
  }
}

namespace {
void fill_random_block(RandomDist dist, const Tensor& t, const RngKey& key,
                       const Shape& global_shape, const Shape& start, float a, float b) {
  LOOM_CHECK(is_floating(t.dtype())) << "random fill of a " << dtype_name(t.dtype()) << " tensor";
  LOOM_CHECK(global_shape.size() == size_t(t.dim()) && start.size() == size_t(t.dim()))
      << "random fill: block " << t.shape() << " at " << start << " of global shape "
      << global_shape << ": ranks differ";
  for (int64_t d = 0; d < t.dim(); ++d)
    LOOM_CHECK(start[d] >= 0 && start[d] + t.size(d) <= global_shape[d])
        << "random fill: block " << t.shape() << " at " << start << " lies outside "
        << global_shape;
  Tensor target = t.is_contiguous() ? t : detail::empty_like(t);
  backend_of(t).random(dist, key.hash(), global_shape, start, a, b, target);
  if (!t.is_contiguous()) backend_of(t).copy(target, t);
}
}  // namespace

void fill_normal(const Tensor& t, const RngKey& key, int64_t global_offset, float mean, float std) {
  Tensor flat = detail::raw_contiguous(t);
  Tensor view = flat.as_strided({flat.numel()}, {1}, flat.offset());
  fill_random_block(RandomDist::Normal, view, key, {global_offset + t.numel()}, {global_offset},
                    mean, std);
  if (!flat.is_same(t)) backend_of(t).copy(flat, t);
}

void fill_uniform(const Tensor& t, const RngKey& key, int64_t global_offset, float low,
                  float high) {
  Tensor flat = detail::raw_contiguous(t);
  Tensor view = flat.as_strided({flat.numel()}, {1}, flat.offset());
  fill_random_block(RandomDist::Uniform, view, key, {global_offset + t.numel()}, {global_offset},
                    low, high);
  if (!flat.is_same(t)) backend_of(t).copy(flat, t);
}

void fill_normal_block(const Tensor& t, const RngKey& key, const Shape& global_shape,
                       const Shape& start, float mean, float std) {
  fill_random_block(RandomDist::Normal, t, key, global_shape, start, mean, std);
}

Tensor randn(const Shape& shape, const RngKey& key, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  fill_normal(t, key);
  return t;
}

}  // namespace loom
