#include "loom/train/dry_run.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "loom/core/error.h"
#include "loom/parallel/pipeline.h"
#include "loom/plan/memory_model.h"
#include "loom/train/recipe.h"

namespace loom::train {

namespace {

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

// The keys whose value is not the default, as "  section.key = value   (default: d)".
std::string differences(const Config& c, const std::vector<ConfigFile::Read>& reads) {
  const toml::table resolved = toml::parse(c.resolved_toml);
  std::ostringstream os;
  for (const ConfigFile::Read& r : reads) {
    const toml::node* value = resolved[r.section][r.key].node();
    if (!value) continue;
    toml::table now;
    now.insert("v", *value);
    if (now == toml::parse("v = " + r.fallback)) continue;
    std::ostringstream text;
    text << now;  // "v = value"
    os << "  " << r.section << "." << r.key << text.str().substr(1) << "   (default " << r.fallback
       << ")\n";
  }
  return os.str();
}

std::string megabytes(double bytes) {
  return format("%10.3f", bytes / 1e6);
}

}  // namespace

std::string dry_run_report(const std::string& config_path,
                           const std::vector<std::string>& overrides, int64_t processes) {
  std::vector<ConfigFile::Read> reads;
  const Config c = load_config(config_path, overrides, &reads);
  parallel::Topology t = c.parallel.topology;
  if (processes == 0)  // the degrees set, dp_shard 1 where it is left to fill the world
    processes = t.dims.pp * t.dims.dp_replicate * std::max<int64_t>(t.dims.dp_shard, 1) *
                t.dims.cp * t.dims.tp;
  t.dims = t.dims.resolved(processes);
  const int64_t dp = t.dims.dp_replicate * t.dims.dp_shard;
  LOOM_CHECK(c.train.batch_size % dp == 0)
      << "config " << config_path << ": train.batch_size " << c.train.batch_size
      << " (the global batch) does not split evenly over " << dp << " data-parallel ranks";
  LOOM_CHECK(dp % t.ep == 0) << "config " << config_path << ": parallel.ep " << t.ep
                             << " does not divide the " << dp << " data-parallel ranks";

  std::unique_ptr<nn::Module> model;
  {
    nn::DeferInit shapes_only;  // no memory for any parameter
    model = make_bare_model(c);
  }
  const nn::ParallelPlan plan = bare_model_plan(c, *model);
  const plan::StepShape shape = step_shape(c, c.train.batch_size);
  const std::vector<plan::RankMemory> ranks = plan::predict_memory(
      *model, plan, shape, {t, c.train.grad_accum, !c.spec().piece_states.empty()});

  std::ostringstream os;
  os << "dry run of " << config_path << " on " << processes << " process"
     << (processes > 1 ? "es" : "")
     << ": nothing started or written (the model built as shapes only)\n\n";
  const std::string changed = differences(c, reads);
  os << "config (what differs from the defaults; every key: loom config keys):\n"
     << (changed.empty() ? "  (nothing)\n" : changed) << "\n";

  double parameters = 0;
  for (const nn::NamedParameter& p : model->named_parameters())
    parameters += double(p.tensor.numel());
  os << "model: " << c.spec().name << ", " << format("%.0f", parameters) << " parameters ("
     << format("%.1f", parameters * 4 / 1e6) << " MB in f32), " << plan.blocks.size()
     << " blocks\n\n";

  const auto& d = t.dims;
  os << "layout: pp " << d.pp << " x dp_replicate " << d.dp_replicate << " x dp_shard "
     << d.dp_shard << " x cp " << d.cp << " x tp " << d.tp << " = " << processes << " process"
     << (processes > 1 ? "es" : "") << "\n";
  if (d.pp > 1) {
    os << "  pp " << d.pp << ": " << parallel::name_of(t.pipeline_schedule) << " over "
       << c.train.grad_accum << " micro-batches (train.grad_accum), blocks";
    const auto split =
        parallel::split_into_stages(int64_t(plan.blocks.size()), d.pp * t.pipeline_chunks);
    for (size_t s = 0; s < split.size(); ++s)
      os << (s ? " | " : " ") << split[s].first << "-" << split[s].second - 1;
    os << "\n";
  }
  os << "  dp " << dp << " (" << d.dp_replicate << " replicated x " << d.dp_shard
     << " sharded): " << parallel::name_of(t.data_parallel) << ", " << c.train.batch_size
     << " samples a micro-batch, " << c.train.batch_size / dp << " per rank\n";
  if (d.cp > 1)
    os << "  cp " << d.cp << ": " << parallel::name_of(t.context_parallel)
       << (t.context_parallel == parallel::ContextParallelKind::Usp
               ? " (ring " + std::to_string(d.cp / t.ulysses) + " x Ulysses " +
                     std::to_string(t.ulysses) + ")"
               : "")
       << " attention, each rank 1/" << d.cp << " of every sequence\n";
  if (d.tp > 1)
    os << "  tp " << d.tp << ": attention heads and MLP split"
       << (d.pp == 1 && !plan.vocab_embedding.empty() ? ", vocabulary split" : "")
       << (t.sequence_parallel ? ", sequence parallel" : "") << "\n";
  if (t.ep > 1) os << "  ep " << t.ep << ": experts split over groups of dp ranks\n";
  os << "  activation checkpointing: "
     << (t.recompute == parallel::Recompute::None   ? "none"
         : t.recompute == parallel::Recompute::Full ? "full"
                                                    : "selective")
     << "\n\n";

  os << "memory per rank, MB (predicted; activations counted in f32"
     << (shape.not_counted.empty() ? "" : ", " + shape.not_counted + " not counted") << "):\n"
     << "  rank      blocks  parameters   gradients   optimizer activations communication"
        "       total\n";
  double most = 0;
  for (const plan::RankMemory& r : ranks) {
    most = std::max(most, r.total());
    os << "  pp " << format("%-6.0f", double(r.pp_rank)) << format("%6.0f", double(r.blocks))
       << "  " << megabytes(r.parameters) << "  " << megabytes(r.gradients) << "  "
       << megabytes(r.optimizer) << "  " << megabytes(r.activations) << "    "
       << megabytes(r.communication) << "  " << megabytes(r.total()) << "\n";
  }
  for (const plan::RankMemory& r : ranks)
    if (r.gradients_by_timing > 0)
      os << "  pp " << r.pp_rank
         << " gradients: " << format("%.3f", (r.gradients - r.gradients_by_timing) / 1e6)
         << " MB at the least (by timing: each block's reduce-scatter arrived before the next "
            "block's gradients)\n";
  // Each process builds only its pieces (nn::DeferInit): the build peak is within the table's.
  os << "\n";
  const double per_process = most;
  if (c.train.device.type != DeviceType::CPU) {
    os << "per GPU: " << format("%.1f", per_process / 1e6)
       << " MB at the most (not checked against the device's memory here)\n";
  } else if (c.run.memory_limit_mb > 0) {
    const double limit = c.run.memory_limit_mb * 1048576.0;
    os << "run.memory_limit_mb per process: " << format("%.1f", limit / 1e6) << " MB; "
       << format("%.1f", per_process / 1e6)
       << " MB at the most: " << (per_process <= limit ? "fits" : "does NOT fit") << "\n";
  } else {
    // The processes share this host (a job over several hosts: its share of them per host).
    const double physical = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
    const double host = double(processes) * per_process;
    os << "this machine: " << format("%.1f", physical / 1e6) << " MB; "
       << format("%.1f", host / 1e6) << " MB for " << processes << " process"
       << (processes > 1 ? "es" : "")
       << " here at the most: " << (host <= physical ? "fits" : "does NOT fit") << "\n";
  }
  return os.str();
}

}  // namespace loom::train
