#include "loom/ops/reduce.h"

#include <algorithm>
#include <optional>

#include "loom/backend/backend.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/shape.h"

namespace loom {

using detail::backend_of;

namespace {

// How a reduction over `dims` is laid out for the (rows, n) kernel: x permuted so the
// reduced dims come last, made contiguous, and viewed as (rows, n).
struct ReductionPlan {
  std::vector<int64_t> perm;  // kept dims, then reduced dims
  std::vector<bool> reduced;  // per dim of x
  Shape out_shape;            // with or without the kept-size-1 dims
  Shape keepdim_shape;        // reduced dims as 1
  int64_t rows = 1, n = 1;
};

ReductionPlan plan_reduction(const char* op, const Tensor& x, std::vector<int64_t> dims,
                             bool keepdim) {
  ReductionPlan p;
  std::vector<bool> reduced(size_t(x.dim()), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = x.wrap_dim(d);
    LOOM_CHECK(!reduced[size_t(w)]) << op << ": dim " << d << " repeated for shape " << x.shape();
    reduced[size_t(w)] = true;
  }
  p.reduced = reduced;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!reduced[size_t(d)]) {
      p.perm.push_back(d);
      p.rows *= x.size(d);
      p.out_shape.push_back(x.size(d));
      p.keepdim_shape.push_back(x.size(d));
    } else {
      p.keepdim_shape.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    }
  }
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[size_t(d)]) {
      p.perm.push_back(d);
      p.n *= x.size(d);
    }
  if (keepdim) p.out_shape = p.keepdim_shape;
  return p;
}

// x rearranged as a contiguous (rows, n) tensor per the plan (raw: no graph).
Tensor as_rows(const Tensor& x, const ReductionPlan& p) {
  Shape shape(p.perm.size()), strides(p.perm.size());
  for (size_t i = 0; i < p.perm.size(); ++i) {
    shape[i] = x.size(p.perm[i]);
    strides[i] = x.stride(p.perm[i]);
  }
  Tensor permuted = detail::raw_contiguous(x.as_strided(shape, strides, x.offset()));
  return permuted.as_strided({p.rows, p.n}, {p.n, 1}, permuted.offset());
}

// When x is contiguous and its reduced dims are one run of adjacent dims followed by kept
// dims, x is already (outer, n, inner): the sum needs no transposing copy.
struct MiddleBlock {
  int64_t outer, inner;
};
std::optional<MiddleBlock> middle_block(const Tensor& x, const ReductionPlan& p) {
  if (!x.is_contiguous()) return std::nullopt;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (p.reduced[size_t(d)]) {
      if (first < 0) first = d;
      last = d;
    }
  if (first < 0) return std::nullopt;  // nothing reduced (a 0-dim tensor)
  for (int64_t d = first; d <= last; ++d)
    if (!p.reduced[size_t(d)]) return std::nullopt;
  MiddleBlock m{1, 1};
  for (int64_t d = 0; d < first; ++d) m.outer *= x.size(d);
  for (int64_t d = last + 1; d < x.dim(); ++d) m.inner *= x.size(d);
  if (m.inner == 1) return std::nullopt;  // already (rows, n): the row kernel applies
  return m;
}

struct SumBackward : Node {
  Shape input_shape, keepdim_shape;
  const char* name() const override { return "SumBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {expand(reshape(g[0], keepdim_shape), input_shape)};
  }
};

struct MaxBackward : Node {
  ReductionPlan plan;
  Shape input_shape;
  DType dtype;
  Tensor argmax;  // (rows) i64
  const char* name() const override { return "MaxBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor rows = zeros({plan.rows, plan.n}, dtype, g[0].device());
    Tensor src = detail::raw_contiguous(g[0]);
    src = src.as_strided({plan.rows, 1}, {1, 1}, src.offset());
    backend_of(rows).scatter_add(rows, 1, argmax.as_strided({plan.rows, 1}, {1, 1}, 0), src);
    // rows is x permuted by plan.perm; undo the permutation.
    Shape permuted_shape;
    for (int64_t d : plan.perm) permuted_shape.push_back(input_shape[size_t(d)]);
    std::vector<int64_t> inverse(plan.perm.size());
    for (size_t i = 0; i < plan.perm.size(); ++i) inverse[size_t(plan.perm[i])] = int64_t(i);
    return {contiguous(permute(reshape(rows, permuted_shape), inverse))};
  }
  void release() override { argmax = Tensor(); }
};

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  detail::check_floating("sum", x, "input");
  ReductionPlan p = plan_reduction("sum", x, dims, keepdim);
  Tensor out = Tensor::empty(p.out_shape, x.dtype(), x.device());
  if (p.n == 0) {
    backend_of(x).fill(out, 0.0);
  } else if (const auto m = middle_block(x, p)) {
    backend_of(x).sum_middle(
        x.as_strided({m->outer, p.n, m->inner}, {p.n * m->inner, m->inner, 1}, x.offset()), out);
  } else {
    backend_of(x).reduce_rows(ReduceOp::Sum, as_rows(x, p), out, Tensor());
  }
  auto node = std::make_shared<SumBackward>();
  node->input_shape = x.shape();
  node->keepdim_shape = p.keepdim_shape;
  record(node, {x}, {out});
  return out;
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  ReductionPlan p = plan_reduction("mean", x, dims, keepdim);
  LOOM_CHECK(p.n > 0) << "mean: reducing an empty tensor of shape " << x.shape();
  return mul_scalar(sum(x, dims, keepdim), 1.0 / double(p.n));
}

Tensor max(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  detail::check_floating("max", x, "input");
  ReductionPlan p = plan_reduction("max", x, dims, keepdim);
  LOOM_CHECK(p.n > 0) << "max: reducing an empty tensor of shape " << x.shape();
  Tensor out = Tensor::empty(p.out_shape, x.dtype(), x.device());
  Tensor argmax = Tensor::empty({p.rows}, DType::I64, x.device());  // index in [0, n) per row
  backend_of(x).reduce_rows(ReduceOp::Max, as_rows(x, p), out, argmax);
  if (any_requires_grad({x})) {
    auto node = std::make_shared<MaxBackward>();
    node->plan = p;
    node->input_shape = x.shape();
    node->dtype = x.dtype();
    node->argmax = argmax;
    record(node, {x}, {out});
  }
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - int64_t(shape.size());
  LOOM_CHECK(lead >= 0) << "sum_to_shape: cannot reduce " << x.shape() << " to " << shape;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[size_t(d - lead)] == 1 && x.size(d) != 1) {
      dims.push_back(d);
    } else {
      LOOM_CHECK(shape[size_t(d - lead)] == x.size(d))
          << "sum_to_shape: cannot reduce " << x.shape() << " to " << shape;
    }
  }
  Tensor s = sum(x, dims, /*keepdim=*/true);  // x's rank, summed dims as 1
  return reshape(s, shape);
}

double sum_squares(const std::vector<Tensor>& tensors, const std::vector<double>& weights) {
  NoGradGuard no_grad;
  double total = 0.0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) continue;
    const double sq = backend_for(t.device()).sum_squares(contiguous(to_dtype(t, DType::F32)));
    total += weights.empty() ? sq : sq * weights[i];
  }
  return total;
}

}  // namespace loom
