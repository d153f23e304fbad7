// Collectives as differentiable ops: what tensor, sequence and context parallelism are built
// from. Each pairs a forward collective with the backward its gradient needs (the conjugate
// pairs of Megatron-LM's mappings, stated here from their definitions):
//
//   op                               forward (on group G of P ranks)        backward
//   copy_to_group(x)                 identity (x is the same on every rank)  all-reduce (sum)
//   reduce_from_group(x)             all-reduce (sum)                        identity
//   all_gather_along(x, d)           concatenate every rank's x along d      reduce-scatter (sum)
//   along d reduce_scatter_along(x, d)       sum over ranks, keep chunk r along d    all-gather
//   along d scatter_along(x, d)              keep chunk r along d (x the same on     all-gather
//   along d
//                                    every rank)
//   gather_along(x, d)               concatenate every rank's x along d      keep chunk r along d
//                                    (what follows runs the same on every rank)
//   all_to_all_along(x, s, g)        send chunk j along s to rank j,         all_to_all_along(dy,
//   g, s)
//                                    concatenate what arrives along g
//   all_to_all_rows(x, s, r)         rows s[j] to rank j, r[j] arrive from j all_to_all_rows(dy,
//                                    (row blocks back to back)               r, s)
//   RingShift(x, k).finish()         x goes to rank r + k, what rank r - k   the gradient goes
//   back:
//                                    sent arrives (mod P)                    a shift by -k
//
// Sizes along a split dimension must divide by P. Every rank of G must make the same calls in
// the same order, in forward and (through autograd) in backward.
#pragma once
#include <memory>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"

namespace loom::parallel {

using GroupPtr = std::shared_ptr<dist::ProcessGroup>;

Tensor copy_to_group(const Tensor& x, const GroupPtr& group);
Tensor reduce_from_group(const Tensor& x, const GroupPtr& group);
Tensor all_gather_along(const Tensor& x, int64_t dim, const GroupPtr& group);
Tensor reduce_scatter_along(const Tensor& x, int64_t dim, const GroupPtr& group);
Tensor scatter_along(const Tensor& x, int64_t dim, const GroupPtr& group);
Tensor gather_along(const Tensor& x, int64_t dim, const GroupPtr& group);
Tensor all_to_all_along(const Tensor& x, int64_t scatter_dim, int64_t gather_dim,
                        const GroupPtr& group);

// x (sum of send_rows, ...) contiguous rows: the next send_rows[j] rows go to rank j; returns
// (sum of recv_rows, ...): recv_rows[j] rows from each rank j, in rank order. The counts must
// agree across the group (what j sends to i is what i expects from j).
Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, const GroupPtr& group);

// A ring shift in two halves, so that the transfer overlaps compute: the constructor starts
// the send and the receive, finish() waits and returns what arrived (differentiable).
class RingShift {
 public:
  RingShift(const Tensor& x, int64_t offset, GroupPtr group);
  ~RingShift();  // an unfinished shift still waits: its buffers must outlive the transfer
  RingShift(const RingShift&) = delete;
  RingShift& operator=(const RingShift&) = delete;
  Tensor finish();

 private:
  Tensor x_, in_, received_;  // in_: x as sent (kept alive until the send is done)
  int64_t offset_;
  GroupPtr group_;
  std::vector<dist::WorkPtr> works_;
};

}  // namespace loom::parallel
