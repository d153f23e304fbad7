#include "loom/parallel/expert_parallel.h"

#include "loom/nn/moe.h"
#include "loom/ops/ops.h"
#include "loom/parallel/functional.h"

namespace loom::parallel {

namespace {

// The rows of one layer's tokens on their way to and from the experts' ranks.
struct Dispatch {
  std::vector<int64_t> send_rows, recv_rows;  // per ep rank
  std::vector<int64_t> local_sizes;           // rows per expert of this rank, from all ranks
  Tensor order;    // received rows (by source rank, then expert) regrouped by expert (then source)
  Tensor inverse;  // and back
};

// From every rank's rows per expert (the all-gathered counts, (P, E)).
Dispatch plan_dispatch(const std::vector<int64_t>& counts, int64_t P, int64_t E, int64_t rank) {
  const int64_t El = E / P;
  Dispatch d;
  d.send_rows.assign(size_t(P), 0);
  d.recv_rows.assign(size_t(P), 0);
  d.local_sizes.assign(size_t(El), 0);
  for (int64_t q = 0; q < P; ++q)
    for (int64_t e = 0; e < El; ++e) {
      d.send_rows[size_t(q)] += counts[size_t(rank * E + q * El + e)];  // mine to q's experts
      const int64_t n = counts[size_t(q * E + rank * El + e)];          // q's to mine
      d.recv_rows[size_t(q)] += n;
      d.local_sizes[size_t(e)] += n;
    }
  // Received: source q's block holds its rows for my experts 0..El-1 in turn.
  std::vector<int64_t> block_start(static_cast<size_t>(P * El));
  int64_t at = 0;
  for (int64_t q = 0; q < P; ++q)
    for (int64_t e = 0; e < El; ++e) {
      block_start[size_t(q * El + e)] = at;
      at += counts[size_t(q * E + rank * El + e)];
    }
  std::vector<int64_t> order, inverse(static_cast<size_t>(at));
  for (int64_t e = 0; e < El; ++e)
    for (int64_t q = 0; q < P; ++q)
      for (int64_t i = 0; i < counts[size_t(q * E + rank * El + e)]; ++i) {
        inverse[size_t(block_start[size_t(q * El + e)] + i)] = int64_t(order.size());
        order.push_back(block_start[size_t(q * El + e)] + i);
      }
  d.order = from_vector(order, {at});
  d.inverse = from_vector(inverse, {at});
  return d;
}

}  // namespace

ExpertParallelLayout apply_expert_parallel(nn::Module& model,
                                           std::shared_ptr<dist::ProcessGroup> ep) {
  ExpertParallelLayout layout;
  const int64_t P = ep->size(), rank = ep->rank();
  const auto layers = nn::moe_layers(model);
  LOOM_CHECK(!layers.empty()) << "expert parallel: the model has no mixture of experts";
  for (const auto& [path, moe] : layers) {
    const int64_t E = moe->config.experts;
    LOOM_CHECK(E % P == 0) << "expert parallel: " << path << "'s " << E
                           << " experts do not split over parallel.ep " << P << " ranks";
    std::vector<std::vector<std::pair<int64_t, int64_t>>> blocks;
    for (int64_t q = 0; q < P; ++q) blocks.push_back({{q * (E / P), E / P}});
    for (auto [name, param] :
         {std::pair<const char*, Tensor*>{"w1", &moe->w1}, {"w3", &moe->w3}, {"w2", &moe->w2}}) {
      if (!param->defined()) continue;
      TensorShard s{param->shape(), 0, blocks};
      param->rebind_storage_and_shape(s.take(*param, rank));
      layout.sharded.emplace(path + "." + name, std::move(s));
    }
    nn::MoE* layer = moe;
    moe->experts = [layer, ep, P, E, rank](const Tensor& xs, const std::vector<int64_t>& sizes) {
      // Every rank's rows per expert, so each knows what it sends and receives.
      Tensor all = Tensor::empty({P * E}, DType::I64);
      ep->all_gather(from_vector(sizes, {E}), all)->wait();
      const Dispatch d = plan_dispatch(to_vector_i64(all), P, E, rank);
      const Tensor received = all_to_all_rows(xs, d.send_rows, d.recv_rows, ep);
      const Tensor out =
          layer->local_experts(index_select(received, 0, d.order), d.local_sizes);  // by expert
      return all_to_all_rows(index_select(out, 0, d.inverse), d.recv_rows, d.send_rows, ep);
    };
  }
  return layout;
}

}  // namespace loom::parallel
