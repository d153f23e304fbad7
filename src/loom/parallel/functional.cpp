#include "loom/parallel/functional.h"

#include <functional>

#include "loom/autograd/node.h"
#include "loom/ops/ops.h"

namespace loom::parallel {

namespace {

// --- the collectives along a dimension, without autograd ---

// x with `dim` moved to the front, contiguous.
Tensor dim_to_front(const Tensor& x, int64_t dim) {
  std::vector<int64_t> order{dim};
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) order.push_back(d);
  return contiguous(permute(x, order));
}

// The inverse of dim_to_front for a tensor whose front dimension has any size.
Tensor dim_from_front(const Tensor& y, int64_t dim) {
  std::vector<int64_t> order;
  for (int64_t d = 1; d <= dim; ++d) order.push_back(d);
  order.insert(order.begin() + dim, 0);
  for (int64_t d = dim + 1; d < y.dim(); ++d) order.push_back(d);
  return contiguous(permute(y, order));
}

Shape with_size(Shape shape, int64_t dim, int64_t size) {
  shape[size_t(dim)] = size;
  return shape;
}

int64_t chunk_of(const Tensor& x, int64_t dim, const dist::ProcessGroup& g, const char* what) {
  const int64_t n = x.size(dim), P = g.size();
  LOOM_CHECK(n % P == 0) << what << ": size " << n << " of dim " << dim << " of " << x.shape()
                         << " does not split over the " << P << " ranks of " << g.describe();
  return n / P;
}

Tensor all_reduce_sum(const Tensor& x, dist::ProcessGroup& g) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  copy_(out, x);
  g.all_reduce(out, dist::ReduceOp::Sum)->wait();
  return out;
}

Tensor gather_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& g) {
  Tensor front = dim_to_front(x, dim);
  Shape shape = front.shape();
  shape[0] *= g.size();
  Tensor all = Tensor::empty(shape, x.dtype(), x.device());
  g.all_gather(front, all)->wait();
  return dim_from_front(all, dim);
}

Tensor reduce_scatter_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& g) {
  const int64_t n = chunk_of(x, dim, g, "reduce_scatter_along");
  Tensor front = dim_to_front(x, dim);
  Tensor mine = Tensor::empty(with_size(front.shape(), 0, n), x.dtype(), x.device());
  g.reduce_scatter(front, mine, dist::ReduceOp::Sum)->wait();
  return dim_from_front(mine, dim);
}

Tensor split_dim(const Tensor& x, int64_t dim, dist::ProcessGroup& g) {
  const int64_t n = chunk_of(x, dim, g, "scatter_along");
  return contiguous(narrow(x, dim, g.rank() * n, n));
}

Tensor all_to_all_dims(const Tensor& x, int64_t s, int64_t gd, dist::ProcessGroup& g) {
  const int64_t P = g.size(), a = chunk_of(x, s, g, "all_to_all_along");
  Tensor front = dim_to_front(x, s);  // [P * a, others...]: chunk j goes to rank j
  Tensor recv = Tensor::empty(front.shape(), x.dtype(), x.device());
  g.all_to_all(front, recv)->wait();
  // recv: [P (source rank), a, others...]; the source rank becomes the outer part of gd.
  Shape split = front.shape();
  split[0] = a;
  split.insert(split.begin(), P);
  Tensor r = reshape(recv, split);
  // Axes of r: 0 = source rank, 1 = the scattered dim (now a), then the other dims in order.
  std::vector<int64_t> order;
  for (int64_t d = 0, other = 2; d < x.dim(); ++d) {
    if (d == s) {
      order.push_back(1);
      continue;
    }
    if (d == gd) order.push_back(0);
    order.push_back(other++);
  }
  Tensor y = contiguous(permute(r, order));
  Shape out = with_size(x.shape(), s, a);
  out[size_t(gd)] *= P;
  return reshape(y, out);
}

Tensor all_to_all_rows_raw(const Tensor& x, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, dist::ProcessGroup& g) {
  int64_t row = 1;  // elements per row (x may have none)
  for (int64_t d = 1; d < x.dim(); ++d) row *= x.size(d);
  int64_t sent = 0, received = 0;
  std::vector<int64_t> send_counts, recv_counts;
  for (int64_t n : send_rows) {
    sent += n;
    send_counts.push_back(n * row);
  }
  for (int64_t n : recv_rows) {
    received += n;
    recv_counts.push_back(n * row);
  }
  LOOM_CHECK(sent == x.size(0)) << "all_to_all_rows: send counts sum to " << sent << " rows, x "
                                << x.shape() << " has " << x.size(0);
  Shape out_shape = x.shape();
  out_shape[0] = received;
  Tensor in = contiguous(x), out = Tensor::empty(out_shape, x.dtype(), x.device());
  g.all_to_all_v(in, send_counts, out, recv_counts)->wait();
  return out;
}

// Sends x to rank r + offset and receives from r - offset (mod P) into `out`.
std::vector<dist::WorkPtr> start_shift(const Tensor& x, const Tensor& out, int64_t offset,
                                       dist::ProcessGroup& g) {
  const int64_t P = g.size(), r = g.rank();
  if (P == 1) {
    copy_(out, x);
    return {};
  }
  const int dst = int(((r + offset) % P + P) % P), src = int(((r - offset) % P + P) % P);
  return {g.send(x, dst), g.recv(out, src)};
}

Tensor shift(const Tensor& x, int64_t offset, dist::ProcessGroup& g) {
  Tensor in = contiguous(x), out = Tensor::empty(x.shape(), x.dtype(), x.device());
  for (auto& w : start_shift(in, out, offset, g)) w->wait();
  return out;
}

// --- autograd ---

struct CollectiveBackward : Node {
  const char* op = "";
  std::function<Tensor(const Tensor&)> grad_of;
  const char* name() const override { return op; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override { return {grad_of(g[0])}; }
};

Tensor with_backward(const char* op, const Tensor& x, Tensor out,
                     std::function<Tensor(const Tensor&)> grad_of) {
  auto node = std::make_shared<CollectiveBackward>();
  node->op = op;
  node->grad_of = [grad_of = std::move(grad_of)](const Tensor& g) {
    NoGradGuard no_grad;
    return grad_of(g);
  };
  record(node, {x}, {out});
  return out;
}

template <typename Fn>
Tensor forward(Fn fn) {
  NoGradGuard no_grad;
  return fn().detach();
}

}  // namespace

Tensor copy_to_group(const Tensor& x, const GroupPtr& group) {
  return with_backward("CopyToGroupBackward", x, x.detach(),
                       [group](const Tensor& g) { return all_reduce_sum(g, *group); });
}

Tensor reduce_from_group(const Tensor& x, const GroupPtr& group) {
  return with_backward("ReduceFromGroupBackward", x,
                       forward([&] { return all_reduce_sum(x, *group); }),
                       [](const Tensor& g) { return g; });
}

Tensor all_gather_along(const Tensor& x, int64_t dim, const GroupPtr& group) {
  dim = x.wrap_dim(dim);
  return with_backward(
      "AllGatherBackward", x, forward([&] { return gather_dim(x, dim, *group); }),
      [group, dim](const Tensor& g) { return reduce_scatter_dim(g, dim, *group); });
}

Tensor reduce_scatter_along(const Tensor& x, int64_t dim, const GroupPtr& group) {
  dim = x.wrap_dim(dim);
  return with_backward("ReduceScatterBackward", x,
                       forward([&] { return reduce_scatter_dim(x, dim, *group); }),
                       [group, dim](const Tensor& g) { return gather_dim(g, dim, *group); });
}

Tensor scatter_along(const Tensor& x, int64_t dim, const GroupPtr& group) {
  dim = x.wrap_dim(dim);
  return with_backward("ScatterBackward", x, forward([&] { return split_dim(x, dim, *group); }),
                       [group, dim](const Tensor& g) { return gather_dim(g, dim, *group); });
}

Tensor gather_along(const Tensor& x, int64_t dim, const GroupPtr& group) {
  dim = x.wrap_dim(dim);
  return with_backward("GatherBackward", x, forward([&] { return gather_dim(x, dim, *group); }),
                       [group, dim](const Tensor& g) { return split_dim(g, dim, *group); });
}

Tensor all_to_all_along(const Tensor& x, int64_t scatter_dim, int64_t gather_dim,
                        const GroupPtr& group) {
  const int64_t s = x.wrap_dim(scatter_dim), gd = x.wrap_dim(gather_dim);
  LOOM_CHECK(s != gd) << "all_to_all_along: scatter and gather dims are both " << s;
  return with_backward(
      "AllToAllBackward", x, forward([&] { return all_to_all_dims(x, s, gd, *group); }),
      [group, s, gd](const Tensor& g) { return all_to_all_dims(g, gd, s, *group); });
}

Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, const GroupPtr& group) {
  return with_backward("AllToAllRowsBackward", x, forward([&] {
                         return all_to_all_rows_raw(x, send_rows, recv_rows, *group);
                       }),
                       [group, send_rows, recv_rows](const Tensor& g) {
                         return all_to_all_rows_raw(g, recv_rows, send_rows, *group);
                       });
}

RingShift::RingShift(const Tensor& x, int64_t offset, GroupPtr group)
    : x_(x), offset_(offset), group_(std::move(group)) {
  NoGradGuard no_grad;
  in_ = contiguous(x).detach();
  received_ = Tensor::empty(x.shape(), x.dtype(), x.device());
  works_ = start_shift(in_, received_, offset_, *group_);
}

RingShift::~RingShift() {
  for (auto& w : works_) {
    try {
      w->wait();
    } catch (...) {  // already failing: the error that brought us here is the one to report
    }
  }
}

Tensor RingShift::finish() {
  for (auto& w : works_) w->wait();
  works_.clear();
  in_ = Tensor();
  GroupPtr group = group_;
  const int64_t back = -offset_;
  return with_backward("RingShiftBackward", x_, received_,
                       [group, back](const Tensor& g) { return shift(g, back, *group); });
}

}  // namespace loom::parallel
