#include "loom/ops/index.h"

#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/ops/shape.h"

namespace loom {

using detail::backend_of;

namespace {

void check_index(const char* op, const Tensor& index) {
  detail::check_defined(op, index, "index");
  LOOM_CHECK(index.dtype() == DType::I64)
      << op << ": index must be i64, got " << dtype_name(index.dtype()) << " " << index.shape();
}

// Indices are metadata, often made on the host (positions, routing): they follow the data
// they index to its device.
Tensor on_device_of(const Tensor& data, const Tensor& index) {
  return detail::raw_contiguous(detail::raw_to_device(index, data.device()));
}

struct IndexSelectBackward : Node {
  Shape x_shape;
  DType dtype;
  int64_t dim;
  Tensor index;
  const char* name() const override { return "IndexSelectBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = zeros(x_shape, dtype, g[0].device());
    backend_of(gx).index_add(gx, dim, index, detail::raw_contiguous(g[0]));
    return {gx, Tensor()};
  }
  // The looked-up rows added into the table's gradient (a tied embedding's head made it).
  bool backward_into(const std::vector<Tensor>& g, const Tensor& grad) override {
    if (grad.shape() != x_shape || grad.dtype() != dtype || !g[0].defined()) return false;
    backend_of(grad).index_add(grad, dim, index, detail::raw_contiguous(g[0]));
    return true;
  }
  void release() override { index = Tensor(); }
};

struct GatherBackward : Node {
  Shape x_shape;
  DType dtype;
  int64_t dim;
  Tensor index;
  const char* name() const override { return "GatherBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = zeros(x_shape, dtype, g[0].device());
    backend_of(gx).scatter_add(gx, dim, index, detail::raw_contiguous(g[0]));
    return {gx, Tensor()};
  }
  void release() override { index = Tensor(); }
};

struct ScatterAddBackward : Node {
  int64_t dim;
  Tensor index;
  const char* name() const override { return "ScatterAddBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gsrc;
    if (inputs[2].active()) gsrc = gather(g[0], dim, index);
    return {g[0], Tensor(), gsrc};
  }
  void release() override { index = Tensor(); }
};

struct IndexAddBackward : Node {
  int64_t dim;
  Tensor index;
  const char* name() const override { return "IndexAddBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gsrc;
    if (inputs[2].active()) gsrc = index_select(g[0], dim, index);
    return {g[0], Tensor(), gsrc};
  }
  void release() override { index = Tensor(); }
};

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x, "input");
  check_index("index_select", index);
  LOOM_CHECK(index.dim() == 1) << "index_select: index must be 1-D, got " << index.shape();
  dim = x.wrap_dim(dim);
  Tensor xc = detail::raw_contiguous(x), ic = on_device_of(x, index);
  Shape shape = x.shape();
  shape[size_t(dim)] = index.size(0);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  backend_of(x).index_select(xc, dim, ic, out);
  if (any_requires_grad({x})) {
    auto node = std::make_shared<IndexSelectBackward>();
    node->x_shape = x.shape();
    node->dtype = x.dtype();
    node->dim = dim;
    node->index = ic;
    record(node, {x, index}, {out});
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("gather", x, "input");
  check_index("gather", index);
  dim = x.wrap_dim(dim);
  LOOM_CHECK(index.dim() == x.dim())
      << "gather: index " << index.shape() << " and input " << x.shape() << " differ in rank";
  for (int64_t d = 0; d < x.dim(); ++d)
    LOOM_CHECK(d == dim || index.size(d) <= x.size(d))
        << "gather: index " << index.shape() << " larger than input " << x.shape() << " in dim "
        << d;
  Tensor xc = detail::raw_contiguous(x), ic = on_device_of(x, index);
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  backend_of(x).gather(xc, dim, ic, out);
  if (any_requires_grad({x})) {
    auto node = std::make_shared<GatherBackward>();
    node->x_shape = x.shape();
    node->dtype = x.dtype();
    node->dim = dim;
    node->index = ic;
    record(node, {x, index}, {out});
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined("scatter_add", x, "input");
  detail::check_defined("scatter_add", src, "src");
  check_index("scatter_add", index);
  detail::check_same_dtype("scatter_add", x, src);
  dim = x.wrap_dim(dim);
  LOOM_CHECK(index.shape() == src.shape())
      << "scatter_add: index " << index.shape() << " and src " << src.shape() << " differ";
  LOOM_CHECK(index.dim() == x.dim())
      << "scatter_add: index " << index.shape() << " and input " << x.shape() << " differ in rank";
  for (int64_t d = 0; d < x.dim(); ++d)
    LOOM_CHECK(d == dim || index.size(d) <= x.size(d))
        << "scatter_add: index " << index.shape() << " larger than input " << x.shape()
        << " in dim " << d;
  Tensor out = detail::empty_like(x);
  backend_of(x).copy(x, out);
  Tensor ic = on_device_of(x, index);
  backend_of(x).scatter_add(out, dim, ic, detail::raw_contiguous(src));
  if (any_requires_grad({x, src})) {
    auto node = std::make_shared<ScatterAddBackward>();
    node->dim = dim;
    node->index = ic;
    record(node, {x, index, src}, {out});
  }
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined("index_add", x, "input");
  detail::check_defined("index_add", src, "src");
  check_index("index_add", index);
  detail::check_same_dtype("index_add", x, src);
  LOOM_CHECK(index.dim() == 1) << "index_add: index must be 1-D, got " << index.shape();
  dim = x.wrap_dim(dim);
  Shape expected = x.shape();
  expected[size_t(dim)] = index.size(0);
  LOOM_CHECK(src.shape() == expected)
      << "index_add: src " << src.shape() << " should be " << expected << " (input " << x.shape()
      << ", index " << index.shape() << " along dim " << dim << ")";
  Tensor out = detail::empty_like(x);
  backend_of(x).copy(x, out);
  Tensor ic = on_device_of(x, index);
  backend_of(x).index_add(out, dim, ic, detail::raw_contiguous(src));
  if (any_requires_grad({x, src})) {
    auto node = std::make_shared<IndexAddBackward>();
    node->dim = dim;
    node->index = ic;
    record(node, {x, index, src}, {out});
  }
  return out;
}

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  detail::check_floating("embedding", weight, "weight");
  check_index("embedding", ids);
  LOOM_CHECK(weight.dim() == 2) << "embedding: weight must be (V, C), got " << weight.shape();
  Tensor flat_ids;
  {
    NoGradGuard raw;
    flat_ids = reshape(ids, {-1});  // (N), N = ids.numel()
  }
  Tensor rows = index_select(weight, 0, flat_ids);  // (N, C); records the scatter-add backward
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  return reshape(rows, shape);  // (..., C): ids' shape + (C)
}

}  // namespace loom
