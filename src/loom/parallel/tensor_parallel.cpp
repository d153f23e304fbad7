#include "loom/parallel/tensor_parallel.h"

#include "loom/nn/layers.h"
#include "loom/nn/mamba2.h"
#include "loom/nn/mla.h"
#include "loom/ops/ops.h"
#include "loom/parallel/context_parallel.h"
#include "loom/parallel/vocab_parallel.h"

namespace loom::parallel {

Tensor column_parallel_linear(const Tensor& x, const Tensor& weight_shard, const Tensor& bias_shard,
                              const GroupPtr& group, int64_t seq_dim) {
  // Replicated input: identity forward, its gradient summed over the ranks. Sequence-split
  // input: gathered forward, its gradient reduce-scattered back.
  const Tensor whole = seq_dim < 0 ? copy_to_group(x, group) : all_gather_along(x, seq_dim, group);
  return linear(whole, weight_shard, bias_shard);
}

Tensor row_parallel_linear(const Tensor& x_shard, const Tensor& weight_shard, const Tensor& bias,
                           const GroupPtr& group, int64_t seq_dim) {
  const Tensor partial = linear(x_shard, weight_shard);
  const Tensor out = seq_dim < 0 ? reduce_from_group(partial, group)
                                 : reduce_scatter_along(partial, seq_dim, group);
  return bias.defined() ? add(out, bias) : out;
}

}  // namespace loom::parallel

namespace loom::parallel {

Shape TensorShard::shape(int64_t rank) const {
  Shape s = whole_shape;
  s[size_t(dim)] = 0;
  for (const auto& [start, length] : blocks.at(size_t(rank))) s[size_t(dim)] += length;
  return s;
}

Tensor TensorShard::take(const Tensor& whole, int64_t rank) const {
  NoGradGuard no_grad;
  if (!whole.allocated())
    return Tensor::unallocated(shape(rank), whole.dtype(), whole.device(), MemCategory::Parameters);
  Tensor part = Tensor::empty(shape(rank), whole.dtype(), whole.device(), MemCategory::Parameters);
  int64_t at = 0;
  for (const auto& [start, length] : blocks.at(size_t(rank))) {
    copy_(narrow(part, dim, at, length), narrow(whole, dim, start, length));
    at += length;
  }
  return part;
}

std::vector<TensorShard::Run> TensorShard::runs(int64_t rank) const {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= whole_shape[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < whole_shape.size(); ++d) inner *= whole_shape[d];
  const int64_t local_size = shape(rank)[size_t(dim)], whole_size = whole_shape[size_t(dim)];
  std::vector<Run> out;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (const auto& [start, length] : blocks.at(size_t(rank))) {
      const Run run{(o * local_size + at) * inner, (o * whole_size + start) * inner,
                    length * inner};
      at += length;
      if (!out.empty() && out.back().local + out.back().length == run.local &&
          out.back().whole + out.back().length == run.whole)
        out.back().length += run.length;
      else
        out.push_back(run);
    }
  }
  return out;
}

namespace {

// Rank q of P takes the q-th of P equal ranges of n (n divisible by P, checked by the caller).
std::vector<std::vector<std::pair<int64_t, int64_t>>> even_blocks(int64_t n, int64_t P) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out;
  for (int64_t q = 0; q < P; ++q) out.push_back({{q * (n / P), n / P}});
  return out;
}

class Applier {
 public:
  Applier(nn::Module& model, const GroupPtr& group, bool sequence_parallel,
          const nn::ParallelPlan& plan)
      : model_(model),
        group_(group),
        P_(group->size()),
        rank_(group->rank()),
        seq_dim_(sequence_parallel ? plan.sequence_dim : -1) {}

  void column(const std::string& path) {
    auto& lin = as_linear(path);
    const int64_t out = lin.weight.size(0);
    LOOM_CHECK(out % P_ == 0) << "tensor parallel: " << path << " has " << out
                              << " output features, not divisible by tp = " << P_;
    split_rows(path, lin, even_blocks(out, P_), seq_dim_);
  }

  void row(const std::string& path) {
    auto& lin = as_linear(path);
    const int64_t in = lin.weight.size(1);
    LOOM_CHECK(in % P_ == 0) << "tensor parallel: " << path << " has " << in
                             << " input features, not divisible by tp = " << P_;
    split_columns(path, lin, even_blocks(in, P_));
  }

  void attention(const std::string& path) {
    auto* attn = dynamic_cast<nn::Attention*>(&model_.submodule(path));
    LOOM_CHECK(attn) << "tensor parallel: " << path << " is not an attention module";
    const int64_t H = attn->config.heads, Hkv = attn->config.kv_heads, Dh = attn->head_dim;
    LOOM_CHECK(H % P_ == 0 && Hkv % P_ == 0)
        << "tensor parallel: " << path << " has " << H << " heads and " << Hkv
        << " key/value heads; both must be divisible by tp = " << P_;
    const int64_t h = H / P_, hkv = Hkv / P_;
    // qkv's output rows are [q heads | k heads | v heads]: each rank takes its heads of each.
    std::vector<std::vector<std::pair<int64_t, int64_t>>> qkv_rows, proj_columns;
    for (int64_t q = 0; q < P_; ++q) {
      qkv_rows.push_back({{q * h * Dh, h * Dh},
                          {H * Dh + q * hkv * Dh, hkv * Dh},
                          {(H + Hkv) * Dh + q * hkv * Dh, hkv * Dh}});
      proj_columns.push_back({{q * h * Dh, h * Dh}});
    }
    split_rows(path + ".qkv", *attn->qkv, qkv_rows, seq_dim_);
    split_columns(path + ".proj", *attn->proj, proj_columns);
    attn->config.heads = h;
    attn->config.kv_heads = hkv;
  }

  // Latent attention: each rank its heads' rows of the query projection and of kv_up (each
  // head's k_nope and v), and their columns of proj (row-parallel). The latents' projections
  // and norms (q_down, q_norm, kv_down, kv_norm) stay whole and run on the whole input, which
  // the module takes once -- replicated with its gradient summed over the ranks, or gathered
  // along the sequence -- so their gradients hold this rank's heads' share (summed like
  // per_head's). The per-head layers take that input as it is: no second sum.
  void latent_attention(const std::string& path) {
    auto* m = dynamic_cast<nn::LatentAttention*>(&model_.submodule(path));
    LOOM_CHECK(m) << "tensor parallel: " << path << " is not a latent attention module";
    const nn::MlaConfig& c = m->config;
    const int64_t H = m->heads;
    LOOM_CHECK(H % P_ == 0) << "tensor parallel: " << path << " has " << H
                            << " heads, not divisible by tp = " << P_;
    const int64_t h = H / P_, qk = c.nope_dim + c.rope_dim, kv = c.nope_dim + c.v_dim;
    shard(path + (m->q_proj ? ".q_proj.weight" : ".q_up.weight"),
          (m->q_proj ? m->q_proj : m->q_up)->weight, 0, even_blocks(H * qk, P_));
    shard(path + ".kv_up.weight", m->kv_up->weight, 0, even_blocks(H * kv, P_));
    split_columns(path + ".proj", *m->proj, even_blocks(H * c.v_dim, P_));
    for (const auto& p : m->named_parameters())
      if (p.name.rfind("q_down.", 0) == 0 || p.name.rfind("q_norm.", 0) == 0 ||
          p.name.rfind("kv_down.", 0) == 0 || p.name.rfind("kv_norm.", 0) == 0)
        layout_.partial_gradients.insert(path + "." + p.name);
    m->add_forward_wrapper([group = group_, dim = seq_dim_](const nn::Module::ForwardFn& fn,
                                                            const std::vector<Tensor>& in) {
      return fn(
          {dim < 0 ? copy_to_group(in[0], group) : all_gather_along(in[0], dim, group), in[1]});
    });
    m->heads = h;
  }

  void ssm(const std::string& path) {
    auto* m = dynamic_cast<nn::Mamba2*>(&model_.submodule(path));
    LOOM_CHECK(m) << "tensor parallel: " << path << " is not a Mamba-2 layer";
    const int64_t H = m->heads, G = m->groups, P = m->config.head_dim, N = m->config.state;
    LOOM_CHECK(H % P_ == 0 && G % P_ == 0)
        << "tensor parallel: " << path << " has " << H << " heads in " << G
        << " groups; both must be divisible by tp = " << P_;
    const int64_t h = H / P_, g = G / P_, inner = H * P, GN = G * N;
    // in_proj's output rows are [z | x | B | C | dt], the convolution's channels [x | B | C]:
    // each rank takes its heads' rows of z, x and dt, its groups' of B and C.
    std::vector<std::vector<std::pair<int64_t, int64_t>>> in_rows, conv_rows, by_head, out_cols;
    for (int64_t q = 0; q < P_; ++q) {
      const std::pair<int64_t, int64_t> x{q * h * P, h * P}, b{inner + q * g * N, g * N},
          c{inner + GN + q * g * N, g * N};
      in_rows.push_back({x,
                         {inner + x.first, x.second},
                         {inner + b.first, b.second},
                         {inner + c.first, c.second},
                         {2 * inner + 2 * GN + q * h, h}});
      conv_rows.push_back({x, b, c});
      by_head.push_back({{q * h, h}});
      out_cols.push_back({x});
    }
    split_rows(path + ".in_proj", *m->in_proj, in_rows, seq_dim_);
    shard(path + ".conv_weight", m->conv_weight, 0, conv_rows);
    shard(path + ".conv_bias", m->conv_bias, 0, conv_rows);
    for (auto [name, t] : {std::pair{".dt_bias", m->dt_bias}, {".A_log", m->A_log}, {".D", m->D}})
      shard(path + name, t, 0, by_head);
    shard(path + ".norm.weight", m->norm->weight, 0, out_cols);
    split_columns(path + ".out_proj", *m->out_proj, out_cols);
    m->heads = h;
    m->groups = g;
  }

  // Vocabulary parallelism: embedding rows, head rows (the same split) and a loss over the
  // split logits. Embedding and head run outside the sequence-parallel region: their
  // activations are whole.
  // Under a pipeline a rank holds the embedding (first stage), the head (last stage) or both:
  // it splits what it holds, alike on both ends.
  void vocabulary(const nn::ParallelPlan& plan) {
    nn::Module* emb_module = find(plan.vocab_embedding);
    nn::Module* head = find(plan.vocab_head);
    auto* emb = dynamic_cast<nn::Embedding*>(emb_module);
    LOOM_CHECK(!emb_module || emb)
        << "tensor parallel: " << plan.vocab_embedding << " is not an embedding";
    auto* lin = dynamic_cast<nn::Linear*>(head);
    LOOM_CHECK(emb || lin) << "tensor parallel: neither " << plan.vocab_embedding << " nor "
                           << plan.vocab_head << " is on this rank";
    const int64_t V = emb ? emb->weight.size(0) : lin->weight.size(0);
    LOOM_CHECK(V % P_ == 0) << "tensor parallel: the vocabulary of " << plan.vocab_embedding << " ("
                            << V << ") is not divisible by tp = " << P_;
    if (emb) {
      shard(plan.vocab_embedding + ".weight", emb->weight, 0, even_blocks(V, P_));
      emb->add_forward_wrapper([group = group_, weight = emb->weight](
                                   const nn::Module::ForwardFn&, const std::vector<Tensor>& in) {
        return vocab_parallel_embedding(in[0], weight, group);
      });
    }
    if (lin) {
      LOOM_CHECK(lin->weight.size(0) == V)
          << "tensor parallel: " << plan.vocab_head << " has " << lin->weight.size(0)
          << " outputs, the vocabulary " << V;
      split_rows(plan.vocab_head, *lin, even_blocks(V, P_), /*seq_dim=*/-1);
    } else if (head && emb) {
      LOOM_CHECK(dynamic_cast<nn::TiedProjection*>(head))
          << "tensor parallel: " << plan.vocab_head << " is neither a Linear nor a tied projection";
      head->add_forward_wrapper(column_input(-1));  // its weight is the embedding's, split above
    }
    LOOM_CHECK(!plan.loss.empty()) << "tensor parallel: a split vocabulary needs the plan's loss";
    model_.submodule(plan.loss).add_forward_wrapper(
        [group = group_](const nn::Module::ForwardFn&, const std::vector<Tensor>& in) {
          return vocab_parallel_cross_entropy(in[0], in[1], group);
        });
  }

  nn::Module* find(const std::string& path) {
    nn::Module* found = nullptr;
    model_.for_each_submodule([&](const std::string& p, nn::Module& m) {
      if (p == path) found = &m;
    });
    return found;
  }

  // Sequence parallelism: the residual stream is split from the first block's input to the
  // last block's output; inside, conditioning inputs are used on sequence shards, so their
  // gradients (and those of the blocks' whole parameters) are partial per rank.
  // A segmented stream (plan.sequence_segments) is split segment by segment: each rank its
  // chunk of each, in segment order.
  void sequence_region(const nn::ParallelPlan& plan) {
    const std::vector<std::string>& blocks = plan.blocks;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const bool first = plan.stretch_starts_at(i);
      const bool last = i + 1 == blocks.size() || plan.stretch_starts_at(i + 1);
      model_.submodule(blocks[i]).add_forward_wrapper(
          [group = group_, dim = seq_dim_, first, last, segments = plan.sequence_segments](
              const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
            const int64_t P = group->size();
            auto index = [](const std::vector<int64_t>& rows) {
              return from_vector(rows, {int64_t(rows.size())});
            };
            std::vector<Tensor> args = in;
            if (first) {
              const Tensor x =
                  segments.empty()
                      ? args[0]
                      : index_select(args[0], dim,
                                     index(segment_order(segments, args[0].size(dim), P)));
              args[0] = scatter_along(x, dim, group);
            }
            for (size_t k = 1; k < args.size(); ++k)
              if (args[k].defined() && args[k].requires_grad())
                args[k] = copy_to_group(args[k], group);
            Tensor out = fn(args);
            if (!last) return out;
            out = gather_along(out, dim, group);
            if (segments.empty()) return out;
            return index_select(out, dim,
                                index(inverse_order(segment_order(segments, out.size(dim), P))));
          });
      for (const auto& p : model_.submodule(blocks[i]).named_parameters()) {
        const std::string name = blocks[i] + "." + p.name;
        if (!layout_.sharded.count(name)) layout_.partial_gradients.insert(name);
      }
    }
  }

  // A parameter every head uses alike: whole, its gradient summed over the ranks' heads.
  void per_head(const std::string& name) {
    bool found = false;
    for (const auto& p : model_.named_parameters()) found |= p.name == name;
    LOOM_CHECK(found) << "tensor parallel: the model has no parameter " << name;
    layout_.partial_gradients.insert(name);
  }

  TensorParallelLayout layout() { return std::move(layout_); }

 private:
  nn::Linear& as_linear(const std::string& path) {
    auto* lin = dynamic_cast<nn::Linear*>(&model_.submodule(path));
    LOOM_CHECK(lin) << "tensor parallel: " << path << " is not a Linear";
    return *lin;
  }

  void shard(const std::string& name, const Tensor& param, int64_t dim,
             std::vector<std::vector<std::pair<int64_t, int64_t>>> blocks) {
    TensorShard s{param.shape(), dim, std::move(blocks)};
    param.rebind_storage_and_shape(s.take(param, rank_));
    layout_.sharded.emplace(name, std::move(s));
  }

  // Column-parallel: output rows (and bias) split; the input is gathered (or, replicated,
  // its gradient summed).
  void split_rows(const std::string& path, nn::Linear& lin,
                  const std::vector<std::vector<std::pair<int64_t, int64_t>>>& rows,
                  int64_t seq_dim) {
    shard(path + ".weight", lin.weight, 0, rows);
    if (lin.bias.defined()) shard(path + ".bias", lin.bias, 0, rows);
    lin.add_forward_wrapper(column_input(seq_dim));
  }

  // A column-parallel layer's input: replicated (its gradient summed over the ranks), or split
  // along the sequence (gathered).
  nn::Module::ForwardWrapper column_input(int64_t seq_dim) const {
    return [group = group_, dim = seq_dim](const nn::Module::ForwardFn& fn,
                                           const std::vector<Tensor>& in) {
      return fn({dim < 0 ? copy_to_group(in[0], group) : all_gather_along(in[0], dim, group)});
    };
  }

  // Row-parallel: input columns split; the partial outputs are summed (or reduce-scattered
  // along the sequence) and the whole bias added once, after the sum.
  void split_columns(const std::string& path, nn::Linear& lin,
                     const std::vector<std::vector<std::pair<int64_t, int64_t>>>& columns) {
    LOOM_CHECK(!lin.gelu) << "tensor parallel: " << path << " applies a GELU to its output, "
                          << "which a row-parallel layer only has as partial sums; make it "
                          << "column-parallel";
    shard(path + ".weight", lin.weight, 1, columns);
    const Tensor bias = std::exchange(lin.bias, Tensor());
    lin.add_forward_wrapper([group = group_, dim = seq_dim_, bias](const nn::Module::ForwardFn& fn,
                                                                   const std::vector<Tensor>& in) {
      const Tensor partial = fn(in);
      const Tensor out =
          dim < 0 ? reduce_from_group(partial, group) : reduce_scatter_along(partial, dim, group);
      return bias.defined() ? add(out, bias) : out;
    });
  }

  nn::Module& model_;
  GroupPtr group_;
  int64_t P_, rank_, seq_dim_;
  TensorParallelLayout layout_;
};

}  // namespace

TensorParallelLayout apply_tensor_parallel(nn::Module& model, const nn::ParallelPlan& plan,
                                           const GroupPtr& group, bool sequence_parallel) {
  Applier apply(model, group, sequence_parallel, plan);
  for (const auto& path : plan.attention) apply.attention(path);
  for (const auto& path : plan.latent_attention) apply.latent_attention(path);
  for (const auto& path : plan.ssm) apply.ssm(path);
  for (const auto& path : plan.column) apply.column(path);
  for (const auto& path : plan.row) apply.row(path);
  if (!plan.vocab_embedding.empty()) apply.vocabulary(plan);
  for (const auto& name : plan.per_head) apply.per_head(name);
  if (sequence_parallel) {
    LOOM_CHECK(!plan.blocks.empty()) << "sequence parallel: the model names no blocks";
    apply.sequence_region(plan);
  }
  return apply.layout();
}

}  // namespace loom::parallel
