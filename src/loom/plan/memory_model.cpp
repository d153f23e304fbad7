#include "loom/plan/memory_model.h"

#include <algorithm>
#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/parallel/pipeline.h"
#include "loom/parallel/pipeline_schedule.h"

namespace loom::plan {

namespace {

constexpr double kF32 = 4;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
bool in_module(const std::string& name, const std::string& module) {
  return !module.empty() && starts_with(name, module + ".");
}
bool listed(const std::vector<std::string>& modules, const std::string& m) {
  return std::find(modules.begin(), modules.end(), m) != modules.end();
}

// This rank's elements of one parameter of the whole model under tensor and expert
// parallelism (parallel/tensor_parallel.h, expert_parallel.h): heads, column and row splits,
// the vocabulary when it splits, the experts over ep; everything else whole.
double local_elements(const nn::NamedParameter& p, const nn::ParallelPlan& plan,
                      const std::set<std::string>& mixtures, int64_t tp, int64_t ep,
                      bool vocab_split) {
  const double n = double(p.tensor.numel());
  const size_t dot = p.name.rfind('.');
  const std::string module = p.name.substr(0, dot), leaf = p.name.substr(dot + 1);
  if (mixtures.count(module) && (leaf == "w1" || leaf == "w2" || leaf == "w3"))
    return n / double(ep);  // the experts' stacks; whole on every tensor-parallel rank
  if (tp == 1) return n;
  const size_t up = module.rfind('.');
  const std::string parent = up == std::string::npos ? "" : module.substr(0, up);
  const std::string last = module.substr(up == std::string::npos ? 0 : up + 1);
  if (listed(plan.attention, parent)) {
    if (last == "qkv") return n / double(tp);
    if (last == "proj") return leaf == "weight" ? n / double(tp) : n;
  }
  if (listed(plan.column, module)) return n / double(tp);
  if (listed(plan.row, module)) return leaf == "weight" ? n / double(tp) : n;
  if (vocab_split && (module == plan.vocab_embedding || module == plan.vocab_head))
    return n / double(tp);
  return n;
}

}  // namespace

std::vector<RankMemory> predict_memory(const nn::Module& model, const nn::ParallelPlan& plan,
                                       const StepShape& shape, const MemoryLayout& layout) {
  const parallel::Topology& t = layout.topology;
  const int64_t pp = t.dims.pp, tp = t.dims.tp, dp = t.dims.dp_shard;
  const int64_t chunks = t.pipeline_chunks, stages = pp * chunks;
  LOOM_CHECK(dp >= 1) << "predict_memory: dp_shard must be resolved, got " << dp;
  const bool vocab_split = tp > 1;
  const std::vector<nn::NamedParameter> params = model.named_parameters();
  std::set<std::string> mixtures;  // modules with a router: their w1/w2/w3 are expert stacks
  for (const nn::NamedParameter& p : params) {
    const size_t at = p.name.rfind(".router.weight");
    if (at != std::string::npos && at + 14 == p.name.size()) mixtures.insert(p.name.substr(0, at));
  }

  // Which pipeline rank holds each block, and each rank's blocks.
  const int64_t depth = int64_t(plan.blocks.size());
  std::vector<int64_t> block_rank(size_t(depth), 0);
  std::vector<RankMemory> ranks(static_cast<size_t>(pp));
  if (pp > 1) {
    const auto split = parallel::split_into_stages(depth, stages);
    for (int64_t s = 0; s < stages; ++s)
      for (int64_t b = split[size_t(s)].first; b < split[size_t(s)].second; ++b)
        block_rank[size_t(b)] = s % pp;
  }
  for (int64_t r = 0; r < pp; ++r) ranks[size_t(r)].pp_rank = r;
  for (int64_t b = 0; b < depth; ++b) ranks[size_t(block_rank[size_t(b)])].blocks++;

  // Bytes of parameters per rank: in each block, and outside the blocks.
  std::vector<std::vector<double>> block_bytes(static_cast<size_t>(pp));  // per rank: each block's
  std::vector<double> rest_bytes(static_cast<size_t>(pp), 0.0);
  // ZeRO-2/3 units outside the blocks (parallel/zero.h): each end module's bytes per rank, and
  // those of the modules at both ends (a tied embedding: gathered from forward to backward).
  std::vector<std::map<std::string, double>> end_units(static_cast<size_t>(pp));
  std::vector<double> kept_bytes(static_cast<size_t>(pp), 0.0);
  std::map<int64_t, double> by_block;
  for (const nn::NamedParameter& p : params) {
    const double bytes = kF32 * local_elements(p, plan, mixtures, tp, t.ep, vocab_split);
    int64_t block = -1;
    for (int64_t b = 0; b < depth && block < 0; ++b)
      if (in_module(p.name, plan.blocks[size_t(b)])) block = b;
    if (block >= 0) {
      by_block[block] += bytes;
      continue;
    }
    bool first = pp == 1, last = pp == 1;
    for (const std::string& m : plan.first_stage) first |= in_module(p.name, m);
    for (const std::string& m : plan.last_stage) last |= in_module(p.name, m);
    LOOM_CHECK(first || last) << "predict_memory: parameter " << p.name
                              << " is in no block and on no pipeline end";
    if (first) rest_bytes[0] += bytes;
    if (last && pp > 1) rest_bytes[size_t(pp - 1)] += bytes;
    bool first_end = false, last_end = false;
    for (const std::string& m : plan.first_stage)
      if (in_module(p.name, m)) first_end = true, end_units[0][m] += bytes;
    for (const std::string& m : plan.last_stage)
      if (in_module(p.name, m)) {
        last_end = true;
        if (pp > 1 || !first_end) end_units[size_t(pp - 1)][m] += bytes;
      }
    if (first_end && last_end) {
      kept_bytes[0] += bytes;
      if (pp > 1) kept_bytes[size_t(pp - 1)] += bytes;
    }
  }
  for (const auto& [b, bytes] : by_block)
    block_bytes[size_t(block_rank[size_t(b)])].push_back(bytes);

  // Micro-batches (model chunks) in flight per pipeline rank at the schedule's peak.
  std::vector<int64_t> in_flight(size_t(pp), 1);
  if (pp > 1) {
    const parallel::PipeSimulation sim = parallel::simulate(
        parallel::make_pipe_schedule(t.pipeline_schedule, pp, layout.micro_batches, chunks));
    LOOM_CHECK(sim.ok) << "predict_memory: " << sim.error;
    in_flight = sim.peak_in_flight;
  }

  const BlockValues& v = shape.values;
  // Tokens one block of this rank sees per micro-batch: its data-parallel share of the batch,
  // its context-parallel share of each sequence.
  const double n = double(shape.batch) / double(t.dims.dp_replicate * t.dims.dp_shard) * v.tokens /
                   double(t.dims.cp);
  const bool sp = t.sequence_parallel && tp > 1;
  // With sequence parallelism the norms run on 1/tp of the rows, but each column linear keeps
  // its gathered (whole) input: two per block.
  const double whole = sp ? v.whole / double(tp) + 2 * v.width : v.whole;
  // Ring attention (also USP's) keeps contiguous copies of q, k and v.
  const bool ring = t.dims.cp > 1 && t.context_parallel != parallel::ContextParallelKind::Ulysses;
  const double copies = ring ? v.qkv : 0;
  const double per_block = whole + (v.split + copies) / double(tp);  // values per token
  // Recompute keeps each block's input (full), and also the projections' and attention's
  // outputs (selective).
  const double input = sp ? v.width / double(tp) : v.width;
  double kept = per_block;
  if (t.recompute == parallel::Recompute::Full) kept = input;
  if (t.recompute == parallel::Recompute::Selective)
    kept = input + (v.matmul_split + copies) / double(tp);

  for (int64_t r = 0; r < pp; ++r) {
    RankMemory& m = ranks[size_t(r)];
    double p = rest_bytes[size_t(r)], largest = 0;
    for (double b : block_bytes[size_t(r)]) {
      p += b;
      largest = std::max(largest, b);
    }
    // The largest unit ZeRO-2/3 wraps (a block, or a module at an end), and what of the rest
    // stays gathered: a module at both ends, or all of it when the plan names no ends.
    double largest_unit = largest;
    for (const auto& [name, bytes] : end_units[size_t(r)])
      largest_unit = std::max(largest_unit, bytes);
    const int64_t units = m.blocks + int64_t(end_units[size_t(r)].size());
    const double rest = plan.first_stage.empty() && plan.last_stage.empty() ? rest_bytes[size_t(r)]
                                                                            : kept_bytes[size_t(r)];
    const double shard = p / double(dp);
    const bool data_parallel = t.dims.dp_replicate * t.dims.dp_shard > 1;
    if (!data_parallel) {  // one replica: no gradient exchange
      m.parameters = p, m.gradients = p, m.optimizer = 2 * p;
    } else {
      switch (t.data_parallel) {
        case parallel::DataParallel::DDP:  // whole gradients, and buckets as large in all
          m.parameters = p, m.gradients = p, m.optimizer = 2 * p, m.communication = p;
          break;
        case parallel::DataParallel::Zero1:  // whole gradients, and their reduced shard
          m.parameters = p, m.gradients = p + shard, m.optimizer = 2 * shard;
          break;
        case parallel::DataParallel::Zero2:  // the shard, and two units' gradients at a time
          m.parameters = p, m.gradients = shard + 2 * largest_unit + rest;
          m.optimizer = 2 * shard;
          m.gradients_by_timing = largest_unit;
          // Reduce-scatter buffers: one group's shard, or two where the next group launches
          // before the last one's transfer is done (it varies by rank and step): the most.
          m.communication = 2 * largest_unit / double(dp);
          break;
        case parallel::DataParallel::Zero3: {  // the shard, two units gathered, a kept one
          const double gathered = double(std::min<int64_t>(2, units)) * largest_unit + rest;
          m.parameters = shard + gathered;
          m.gradients = shard + 2 * largest_unit + rest;
          m.gradients_by_timing = largest_unit;
          m.optimizer = 2 * shard;
          m.communication = 2 * largest_unit / double(dp);  // as ZeRO-2's
          if (t.gather_dtype == DType::BF16)
            m.communication += (largest_unit / double(dp) + largest_unit) / 2;
          break;
        }
      }
      // Under recompute a block's gradients are made apart from its bound buffer, then
      // copied into it: one block's more.
      if (t.data_parallel >= parallel::DataParallel::Zero2 &&
          t.recompute != parallel::Recompute::None)
        m.gradients += largest;
    }
    // A pipeline's stage inputs are leaves whose gradients (sent back, the sends waited for at
    // the end of the step) stay until then: every micro-batch's, on each stage but the first.
    if (pp > 1)
      m.gradients +=
          double(chunks - (r == 0 ? 1 : 0)) * double(layout.micro_batches) * n * v.width * kF32;
    // An EMA of the weights this rank holds (its pieces: under ZeRO the shard) counts as
    // optimizer state.
    if (layout.ema)
      m.optimizer += data_parallel && t.data_parallel != parallel::DataParallel::DDP ? shard : p;
    // Activations: every block's kept values for each micro-batch in flight, one block's whole
    // set again under recompute, and the larger of the MLP's and the head's backward peaks.
    const double chunks_blocks = double(m.blocks) / double(chunks);
    double values = double(in_flight[size_t(r)]) * chunks_blocks * kept;
    if (t.recompute != parallel::Recompute::None) values += per_block;
    const double head = r == pp - 1 ? v.head + v.head_vocabulary / double(vocab_split ? tp : 1) : 0;
    values += std::max(v.mlp_backward / double(tp), head);
    m.activations = kF32 * values * n;
  }
  return ranks;
}

}  // namespace loom::plan
