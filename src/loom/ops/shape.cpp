#include "loom/ops/shape.h"

#include <numeric>

#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/ops/reduce.h"

namespace loom {

using detail::backend_of;

namespace {

struct ReshapeBackward : Node {
  Shape input_shape;
  const char* name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {reshape(g[0], input_shape)};
  }
};

struct PermuteBackward : Node {
  std::vector<int64_t> inverse;
  const char* name() const override { return "PermuteBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {permute(g[0], inverse)};
  }
};

struct NarrowBackward : Node {
  Shape input_shape;
  DType dtype;
  int64_t dim, start, length;
  const char* name() const override { return "NarrowBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor gx = zeros(input_shape, dtype, g[0].device());
    copy_(narrow(gx, dim, start, length), g[0]);
    return {gx};
  }
};

// split's parts share one node: their gradients are written into one buffer, each element
// once (a NarrowBackward per part would zero a whole input-sized buffer per part and the
// engine would then add them up: 3 x 3 passes over the fused qkv gradient instead of 1).
struct SplitBackward : Node {
  Shape input_shape;
  DType dtype;
  int64_t dim;
  std::vector<int64_t> sizes;
  const char* name() const override { return "SplitBackward"; }
  // The parts' gradients as one tensor without a copy, when they already are the slices of one
  // dense buffer that the split would cut (the attention backward writes q, k and v's
  // gradients that way when they came from one projection); undefined otherwise.
  Tensor already_joined(const std::vector<Tensor>& g) const {
    for (const Tensor& t : g)
      if (!t.defined() || t.dtype() != dtype || t.storage() != g[0].storage()) return Tensor();
    int64_t numel = 1;
    for (int64_t n : input_shape) numel *= n;
    if (g[0].offset() + numel > int64_t(g[0].storage()->nbytes() / dtype_size(dtype)))
      return Tensor();
    const Tensor whole =
        g[0].as_strided(input_shape, contiguous_strides(input_shape), g[0].offset());
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor slot = narrow(whole, dim, at, sizes[i]);
      if (g[i].shape() != slot.shape() || g[i].strides() != slot.strides() ||
          g[i].offset() != slot.offset())
        return Tensor();
      at += sizes[i];
    }
    return whole;
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (Tensor whole = already_joined(g); whole.defined()) return {whole};
    Device device = cpu_device();
    for (const Tensor& t : g)
      if (t.defined()) device = t.device();
    Tensor gx = Tensor::empty(input_shape, dtype, device);
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor slot = narrow(gx, dim, at, sizes[i]);
      if (g[i].defined()) {
        copy_(slot, g[i]);
      } else {
        fill_(slot, 0.0);
      }
      at += sizes[i];
    }
    return {gx};
  }
};

struct ExpandBackward : Node {
  Shape input_shape;
  const char* name() const override { return "ExpandBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {sum_to_shape(g[0], input_shape)};
  }
};

struct IdentityBackward : Node {
  const char* name() const override { return "ContiguousBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override { return {g[0]}; }
};

struct CatBackward : Node {
  int64_t dim;
  std::vector<int64_t> sizes;
  const char* name() const override { return "CatBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return split(g[0], sizes, dim);
  }
};

// The strides a view of `shape` over contiguous-or-not x would need, if one exists:
// each group of new dims must map onto a run of old dims that is contiguous within itself.
bool view_strides(const Tensor& x, const Shape& shape, Shape& strides) {
  if (x.is_contiguous()) {
    strides = contiguous_strides(shape);
    return true;
  }
  if (x.numel() == 0) return false;
  // Split x's dims into chunks that are each contiguous within themselves (a slice of the last
  // dim, a permutation of whole dims...). Walking from the last dim, every chunk must be
  // covered exactly by a run of the new dims, which then take strides inside that chunk.
  const Shape& old_shape = x.shape();
  const Shape& old_strides = x.strides();
  strides.assign(shape.size(), 0);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_stride = old_strides.back();  // stride of the chunk's innermost element
  int64_t chunk_numel = 1, view_numel = 1;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    chunk_numel *= old_shape[size_t(d)];
    const bool chunk_ends = d == 0 || (old_shape[size_t(d - 1)] != 1 &&
                                       old_strides[size_t(d - 1)] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < chunk_numel || shape[size_t(view_d)] == 1)) {
      strides[size_t(view_d)] = view_numel * chunk_stride;
      view_numel *= shape[size_t(view_d)];
      --view_d;
    }
    if (view_numel != chunk_numel) return false;
    if (d > 0) {
      chunk_stride = old_strides[size_t(d - 1)];
      chunk_numel = view_numel = 1;
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor reshape(const Tensor& x, Shape shape) {
  detail::check_defined("reshape", x, "input");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LOOM_CHECK(infer < 0) << "reshape: more than one -1 in " << shape;
      infer = int64_t(i);
    } else {
      LOOM_CHECK(shape[i] >= 0) << "reshape: negative size in " << shape;
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    LOOM_CHECK(known > 0 && x.numel() % known == 0)
        << "reshape: cannot infer -1 in " << shape << " for " << x.numel() << " elements "
        << x.shape();
    shape[size_t(infer)] = x.numel() / known;
  }
  LOOM_CHECK(shape_numel(shape) == x.numel())
      << "reshape: shape " << shape << " (" << shape_numel(shape) << " elements) does not fit "
      << "a tensor of shape " << x.shape() << " (" << x.numel() << " elements)";
  if (shape == x.shape()) return x;
  Shape strides;
  Tensor base = x;
  if (!view_strides(x, shape, strides)) {
    base = contiguous(x);
    strides = contiguous_strides(shape);
  }
  Tensor out = base.as_strided(shape, strides, base.offset());
  auto node = std::make_shared<ReshapeBackward>();
  node->input_shape = base.shape();
  record(node, {base}, {out});
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  start_dim = x.wrap_dim(start_dim);
  end_dim = x.wrap_dim(end_dim);
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  int64_t n = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) n *= x.size(d);
  shape.push_back(n);
  shape.insert(shape.end(), x.shape().begin() + end_dim + 1, x.shape().end());
  return reshape(x, shape);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  LOOM_CHECK(dim >= -x.dim() - 1 && dim <= x.dim())
      << "unsqueeze: dim " << dim << " out of range for shape " << x.shape();
  if (dim < 0) dim += x.dim() + 1;
  Shape shape = x.shape(), strides = x.strides();
  const int64_t stride = dim < x.dim() ? x.stride(dim) * x.size(dim) : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  Tensor out = x.as_strided(shape, strides, x.offset());
  auto node = std::make_shared<ReshapeBackward>();
  node->input_shape = x.shape();
  record(node, {x}, {out});
  return out;
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  dim = x.wrap_dim(dim);
  LOOM_CHECK(x.size(dim) == 1) << "squeeze: dim " << dim << " of shape " << x.shape()
                               << " has size " << x.size(dim) << ", not 1";
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  Tensor out = x.as_strided(shape, strides, x.offset());
  auto node = std::make_shared<ReshapeBackward>();
  node->input_shape = x.shape();
  record(node, {x}, {out});
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  LOOM_CHECK(int64_t(dims.size()) == x.dim())
      << "permute: " << dims.size() << " dims given for a tensor of shape " << x.shape();
  std::vector<int64_t> wrapped(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = x.wrap_dim(dims[i]);
    LOOM_CHECK(!seen[size_t(d)]) << "permute: dim " << d << " repeated in permutation of "
                                 << x.shape();
    seen[size_t(d)] = true;
    wrapped[i] = d;
    shape[i] = x.size(d);
    strides[i] = x.stride(d);
  }
  Tensor out = x.as_strided(shape, strides, x.offset());
  auto node = std::make_shared<PermuteBackward>();
  node->inverse.resize(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) node->inverse[size_t(wrapped[i])] = int64_t(i);
  record(node, {x}, {out});
  return out;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> dims(size_t(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[size_t(x.wrap_dim(d0))], dims[size_t(x.wrap_dim(d1))]);
  return permute(x, dims);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  dim = x.wrap_dim(dim);
  LOOM_CHECK(start >= 0 && length >= 0 && start + length <= x.size(dim))
      << "narrow: range [" << start << ", " << start + length << ") outside dim " << dim
      << " of size " << x.size(dim) << " (shape " << x.shape() << ")";
  Shape shape = x.shape();
  shape[size_t(dim)] = length;
  Tensor out = x.as_strided(shape, x.strides(), x.offset() + start * x.stride(dim));
  auto node = std::make_shared<NarrowBackward>();
  node->input_shape = x.shape();
  node->dtype = x.dtype();
  node->dim = dim;
  node->start = start;
  node->length = length;
  record(node, {x}, {out});
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  LOOM_CHECK(int64_t(shape.size()) >= x.dim())
      << "expand: cannot expand shape " << x.shape() << " to fewer dims " << shape;
  const int64_t lead = int64_t(shape.size()) - x.dim();
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < x.dim(); ++i) {
    const int64_t target = shape[size_t(lead + i)];
    if (x.size(i) == target) {
      strides[size_t(lead + i)] = x.stride(i);
    } else {
      LOOM_CHECK(x.size(i) == 1) << "expand: cannot expand shape " << x.shape() << " to " << shape
                                 << " (dim " << i << " is " << x.size(i) << ")";
    }
  }
  if (shape == x.shape()) return x;
  Tensor out = x.as_strided(shape, strides, x.offset());
  auto node = std::make_shared<ExpandBackward>();
  node->input_shape = x.shape();
  record(node, {x}, {out});
  return out;
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = detail::empty_like(x);
  backend_of(x).copy(x, out);
  record(std::make_shared<IdentityBackward>(), {x}, {out});
  return out;
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  LOOM_CHECK(!xs.empty()) << "cat: no tensors given";
  const Tensor& first = xs[0];
  dim = first.wrap_dim(dim);
  Shape shape = first.shape();
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    detail::check_same_dtype("cat", first, t);
    detail::check_same_device("cat", first, t);
    LOOM_CHECK(t.dim() == first.dim())
        << "cat: tensor " << i << " has shape " << t.shape() << ", tensor 0 has " << first.shape();
    for (int64_t d = 0; d < t.dim(); ++d)
      LOOM_CHECK(d == dim || t.size(d) == first.size(d))
          << "cat: along dim " << dim << ", tensor " << i << " has shape " << t.shape()
          << " but tensor 0 has " << first.shape();
    sizes.push_back(t.size(dim));
    total += t.size(dim);
  }
  shape[size_t(dim)] = total;
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& t : xs) {
    Shape part_shape = shape;
    part_shape[size_t(dim)] = t.size(dim);
    backend_of(out).copy(t, out.as_strided(part_shape, out.strides(), at * out.stride(dim)));
    at += t.size(dim);
  }
  auto node = std::make_shared<CatBackward>();
  node->dim = dim;
  node->sizes = sizes;
  record(node, xs, {out});
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  LOOM_CHECK(!xs.empty()) << "stack: no tensors given";
  std::vector<Tensor> expanded;
  for (const Tensor& t : xs) {
    LOOM_CHECK(t.shape() == xs[0].shape())
        << "stack: shapes differ: " << t.shape() << " vs " << xs[0].shape();
    expanded.push_back(unsqueeze(t, dim));
  }
  return cat(expanded, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = x.wrap_dim(dim);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  LOOM_CHECK(total == x.size(dim)) << "split: sizes add up to " << total << " but dim " << dim
                                   << " of " << x.shape() << " is " << x.size(dim);
  std::vector<Tensor> parts;
  {
    NoGradGuard raw;  // one node for all the parts, below
    int64_t at = 0;
    for (int64_t s : sizes) {
      parts.push_back(narrow(x, dim, at, s));
      at += s;
    }
  }
  if (any_requires_grad({x})) {
    auto node = std::make_shared<SplitBackward>();
    node->input_shape = x.shape();
    node->dtype = x.dtype();
    node->dim = dim;
    node->sizes = sizes;
    record(node, {x}, parts);
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  LOOM_CHECK(split_size > 0) << "split: split_size must be positive, got " << split_size;
  const int64_t n = x.size(dim);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  return split(x, sizes, dim);
}

}  // namespace loom
