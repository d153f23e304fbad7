#include "loom/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "loom/backend/backend.h"
#include "loom/backend/cpu/threads.h"
#include "loom/checkpoint/sharded.h"
#include "loom/core/allocator.h"
#include "loom/core/atomic_file.h"
#include "loom/core/trace.h"
#include "loom/data/prefetch.h"
#include "loom/dist/nccl_group.h"
#include "loom/dist/staged_group.h"
#include "loom/dist/world.h"
#include "loom/lowcomm/diloco.h"
#include "loom/lowcomm/round_agreement.h"
#include "loom/ops/ops.h"
#include "loom/plan/hardware_peak.h"
#include "loom/precision/recipe.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/decay_timing.h"
#include "loom/train/events.h"
#include "loom/train/moe_balance.h"
#include "loom/train/preemption.h"
#include "loom/train/profiler.h"
#include "loom/train/progress.h"
#include "loom/train/recipe.h"
#include "loom/train/report.h"
#include "loom/train/resume_rules.h"
#include "loom/train/step_guard.h"
#include "loom/train/train_step.h"

namespace loom::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<double> sum_over(dist::ProcessGroup& group, const std::vector<double>& values) {
  if (group.size() == 1) return values;
  Tensor t =
      from_vector(std::vector<float>(values.begin(), values.end()), {int64_t(values.size())});
  group.all_reduce(t, dist::ReduceOp::Sum)->wait();
  const std::vector<float> out = to_vector(t);
  return std::vector<double>(out.begin(), out.end());
}

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The job's processes, and how they exchange tensors on `device`: on GPUs through NCCL (host
// tensors still through MPI) or staged through host memory over MPI (dist.device_group), on
// the host through MPI.
std::shared_ptr<dist::ProcessGroup> world_for(Device device, const ParallelConfig& p) {
  std::shared_ptr<dist::ProcessGroup> world = dist::init_world({p.timeout_s});
  if (device.type != DeviceType::CUDA || world->size() == 1) return world;
  if (p.device_group == DeviceGroup::Staged) return dist::staged_device_group(world);
  // NCCL refuses a communicator whose members share a GPU: a process a GPU on each machine.
  const int gpus = backend_for(device).device_count();
  int local = 1;  // processes on this machine, as the launcher says
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"})
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  LOOM_CHECK(local <= gpus) << "dist.device_group \"nccl\": " << local
                            << " processes on this machine for its " << gpus
                            << " GPU(s); NCCL needs a GPU for each process (start at most " << gpus
                            << " a machine, or set dist.device_group = \"staged\", which shares "
                            << "GPUs through host memory)";
  LOOM_CHECK(dist::nccl_available())
      << "dist.device_group \"nccl\": this Loom was built without NCCL (\"staged\" exchanges "
      << "device tensors through host memory instead)";
  return dist::nccl_group(world, p.timeout_s);
}

// Every rank must train the same run: processes started with other configs (on other machines,
// say) would train other models and exchange nonsense.
void check_same_config(dist::ProcessGroup& world, const std::string& resolved) {
  if (world.size() == 1) return;
  const int64_t mine = int64_t(xxh64(resolved.data(), resolved.size()));
  Tensor all = Tensor::empty({world.size()}, DType::I64);
  world.all_gather(from_vector(std::vector<int64_t>{mine}, {1}), all)->wait();
  for (int r = 1; r < world.size(); ++r)
    LOOM_CHECK(all.data<int64_t>()[r] == all.data<int64_t>()[0])
        << "rank " << r << " was started with another config than rank 0 (the resolved "
        << "config.toml differs): every process of a run must read the same config and --set "
        << "overrides";
}

// Where this rank's metrics go: run_dir/metrics.jsonl (main rank), else
// run_dir/logs/metrics-rank-R.jsonl (per-rank memory and timings).
// run.device_memory_limit_mb: every process holds at least one block's parameters whole at a
// time (its share under TP; ZeRO-3 gathers a block for its forward), so a limit below that
// cannot train. Said before anything runs, from the whole model (before it is split).
void check_device_limit(const Config& c, const nn::Module& model, const nn::ParallelPlan& plan) {
  const double limit = c.run.device_memory_limit_mb * 1048576.0;
  if (limit <= 0) return;
  double largest = 0;
  std::string which;
  for (const std::string& block : plan.blocks) {
    double bytes = 0;
    for (const auto& p : model.submodule(block).named_parameters())
      bytes += double(p.tensor.nbytes());
    bytes /= double(c.parallel.topology.dims.tp);
    if (bytes > largest) largest = bytes, which = block;
  }
  LOOM_CHECK(largest < limit) << "config: run.device_memory_limit_mb "
                              << c.run.device_memory_limit_mb << " MB is below one gathered block ("
                              << which << ": " << largest / 1048576.0
                              << " MB on each process), which every "
                              << "process holds whole at a time";
}

std::string metrics_path(const std::string& run_dir, int rank) {
  if (rank == 0) return run_dir + "/metrics.jsonl";
  fs::create_directories(run_dir + "/logs");
  return run_dir + "/logs/metrics-rank-" + std::to_string(rank) + ".jsonl";
}

// This rank's samples of micro-batch `micro` of `step`: entries dp_rank * count.. of its
// train.batch_size.
Slot slot_of(const TrainLoopConfig& tc, const dist::ProcessGroup& dp, int64_t step, int64_t micro) {
  const int64_t count = tc.batch_size / dp.size();
  return {step, micro, micro * tc.batch_size + dp.rank() * count, count};
}

// The CPU's name as /proc/cpuinfo gives it ("AMD EPYC 9B45"), or "" where it has none.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return line.substr(line.find(':') + 2);
  return "";
}

// What one optimizer step produced, agreed over the ranks.
struct StepResult {
  double loss = 0, grad_norm = 0, lr = 0;
  bool out_of_time = false;                 // some rank used up train.max_minutes
  bool preempted = false;                   // some rank noted a preemption signal
  std::optional<lowcomm::OuterStep> outer;  // DiLoCo: the outer step taken after this one
};

// The parts of a run the step touches.
struct Loop {
  const Config& cfg;
  const TrainLoopConfig& tc;
  dist::ProcessGroup& dp;
  // The ranks that agree on every step: dp, or under DiLoCo a worker's own ranks (dp_shard).
  dist::ProcessGroup& step_group;
  Recipe& recipe;
  parallel::ParallelModel& model;
  TrainStep step_core;                     // forward, backward and update (train/train_step.h)
  lowcomm::DiLoCo* diloco;                 // null: no DiLoCo
  precision::LowPrecision* low_precision;  // null: no low-precision recipe
  std::function<void(std::vector<float>&)> max_over_replicas;  // of the ranks holding my layers
  Prefetcher<Batch>& prefetch;
  StepGuard& guard;
  MoeBalance& moe;
  const Progress& progress;
  const DecayTiming& decay;  // the learning-rate schedule and the run's end
  Json data_state;           // of the last batch taken: where the data resumes
  std::unique_ptr<lowcomm::RoundAgreement> agreement;  // DiLoCo; else every step's agreement

  // The next micro-batch, on the model's device (made on the host by the prefetch thread).
  Batch next_batch() {
    Batch b = prefetch.next();
    data_state = b.data_state;
    if (tc.device != cpu_device()) {
      b.x = to_device(b.x, tc.device);
      if (b.y.defined()) b.y = to_device(b.y, tc.device);  // an autoencoder has no labels
    }
    return b;
  }

  // Forward and backward of every micro-batch of the step; gradients accumulate to the mean.
  // Returns this rank's loss.
  double forward_backward_step(int64_t step) {
    auto guard_loss = [this, step](const Tensor& loss) { return guard.guard_loss(loss, step); };
    if (const parallel::Pipeline* pipe = model.pipeline()) {
      AutocastGuard autocast(tc.precision);  // (the recipe's stages are made under it too)
      std::vector<Batch> batches;
      std::vector<Slot> slots;
      for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
        batches.push_back(next_batch());
        slots.push_back(slot_of(tc, dp, step, micro));
      }
      parallel::PipelineStages stages = recipe.pipeline_stages(*pipe, batches, slots);
      stages.loss = [guard_loss, loss = stages.loss](const Tensor& out, int64_t m) {
        return guard_loss(loss(out, m));
      };
      return step_core.forward_backward(stages);
    }
    return step_core.forward_backward(
        [&](int64_t micro) { return recipe.loss(next_batch(), slot_of(tc, dp, step, micro)); },
        guard_loss);
  }

  StepResult train_step(int64_t step) {
    StepResult r;
    if (low_precision) low_precision->begin_step(step);
    moe.begin_step();
    const double loss = forward_backward_step(step);
    if (low_precision) low_precision->end_step(max_over_replicas);
    // The loss over the step group's batch, and whether any rank ran out of time.
    const bool out_of_time = tc.max_minutes > 0 && progress.elapsed_seconds() > tc.max_minutes * 60;
    const std::vector<double> agreed = sum_over(step_group, {loss, out_of_time ? 1.0 : 0.0});
    r.loss = agreed[0] / double(step_group.size());
    r.out_of_time = agreed[1] > 0;
    r.grad_norm = step_core.grad_norm();
    r.lr = decay.schedule().lr_at(step);
    const bool update = guard.accept(step, r.loss, r.grad_norm);
    if (update) step_core.update(r.lr, r.grad_norm);
    moe.end_step(update);  // the aux-loss-free biases follow the update
    if (diloco) r.outer = diloco->after_step(step, step + 1 == decay.end_step());
    if (diloco && (step + 1) % cfg.diloco->inner_steps == 0) moe.average_over_workers();
    step_core.zero_grad();
    // Between outer steps DiLoCo workers exchange nothing, not even the few bytes of an
    // agreement (a round trip each on a slow link): a worker that ran out of skips trains on
    // (its skipped steps changed nothing) until the workers agree on the rollback.
    lowcomm::Decision d{r.out_of_time, guard.preemption_noted(), guard.needs_rollback()};
    if (agreement)
      d = agreement->after_step(step, d.out_of_time, d.preempted, d.roll_back);
    else
      d.preempted = guard.preempted();
    r.out_of_time = d.out_of_time;
    r.preempted = d.preempted;
    if (d.roll_back) moe.resume(guard.roll_back(step));  // biases as checkpointed
    recipe.after_step(step, update);
    return r;
  }
};

}  // namespace

namespace {

// A run's parts, built in this order, each from those before it: the mesh; the recipe, its
// data and its single-device model (shapes only, its init deferred, then placed on
// train.device); a low-precision recipe around the whole model's linear layers, before it is
// split; the parallelised model (each rank allocating and initialising only its pieces, with
// the values a one-process init gives them) and its optimizer; DiLoCo; the
// mixture's balancing; the checkpointer; the learning-rate schedule and the run's end.
struct RunParts {
  explicit RunParts(const Config& c)
      : cfg(c),
        mesh(world_for(c.train.device, c.parallel), c.parallel.topology.dims),
        dp(mesh.group("dp")),
        rank(mesh.world()->rank()),
        decay(c.schedule, c.train.max_minutes * 60) {
    const TrainLoopConfig& tc = cfg.train;
    check_same_config(*mesh.world(), cfg.resolved_toml);
    // The run's peaks, from before its build (a process may train more than one run).
    host_allocator().reset_peak();
    if (tc.device.type != DeviceType::CPU) allocator_for(tc.device.type).reset_peak();
    LOOM_CHECK(tc.batch_size % dp->size() == 0)
        << "train.batch_size " << tc.batch_size << " (the global batch) does not split "
        << "evenly over " << dp->size() << " data-parallel ranks"
        << (cfg.diloco ? " (" + std::to_string(cfg.diloco->workers) + " DiLoCo workers x " +
                             std::to_string(mesh.degree("dp_shard")) + " each)"
                       : "");
    // Everything that can fail on bad input is read before the run directory is touched.
    // The model is built as shapes only: parallelize() gives each rank just its pieces.
    {
      nn::DeferInit deferred;
      recipe = make_recipe(cfg);
    }
    check_device_limit(cfg, recipe->model(), recipe->parallel_plan());
    // The limits hold from the build on (the host's since the command started,
    // apps/loom/commands/train.cpp): no rank holds the whole model at any time, and the peaks
    // cover the build.
    if (tc.device.type != DeviceType::CPU)
      dynamic_cast<CachingAllocator&>(allocator_for(tc.device.type))
          .set_limit(int64_t(cfg.run.device_memory_limit_mb * 1024 * 1024));
    recipe->model().to(tc.device);
    if (tc.low_precision)
      low_precision = std::make_unique<precision::LowPrecision>(recipe->model(), *tc.low_precision);
    // A pipeline stage keeps some of the mixture's layers: its state names them all.
    MoeBalance::Layers mixture = MoeBalance::whole_layers(recipe->model());
    model = parallel::parallelize(recipe->model(), recipe->parallel_plan(), mesh,
                                  cfg.parallel.topology, tc.grad_accum);
    optimizer = optim::make_adamw(model->optimizer_params(), cfg.adamw);
    context = std::make_unique<RunContext>(RunContext{*model, *dp, rank == 0});
    recipe->start(*context);
    WorkerLayout workers;
    if (cfg.diloco) {
      diloco = std::make_unique<lowcomm::DiLoCo>(*model, mesh.group("dp_replicate"), *cfg.diloco);
      workers = {cfg.diloco->workers, mesh.coordinate("dp_replicate"),
                 [this] { return diloco->shared_state(); },
                 [this](bool loading) { diloco->settle(/*drop=*/loading); }};
    }
    moe =
        std::make_unique<MoeBalance>(recipe->model(), mesh, cfg.parallel.topology.sequence_parallel,
                                     tc.grad_accum, cfg.diloco.has_value(), std::move(mixture));
    checkpointer = std::make_unique<Checkpointer>(
        mesh, *model, *optimizer, [this] { return per_worker_state(); }, cfg.spec().name,
        cfg.run_dir(), tc.async_checkpoint, tc.keep_checkpoints, workers);
    if (cfg.resilience.memory_checkpoint_every > 0)
      checkpointer->keep_in_memory(cfg.resilience.memory_store, cfg.run.id);
  }

  // The recipe's per-piece state (an EMA) and DiLoCo's, which each worker keeps its own of.
  std::vector<PieceState> per_worker_state() const {
    std::vector<PieceState> state = recipe->piece_state();
    if (diloco)
      for (auto& s : diloco->worker_state()) state.push_back(s);
    return state;
  }

  // Every part from a checkpoint; returns its trainer_state.json.
  Json resume(const std::string& checkpoint) {
    return resume_parts(checkpointer->load(checkpoint));
  }

  // Every part but the checkpointer's from a checkpoint's trainer_state.json.
  Json resume_parts(const Json& state) {
    decay.resume(state);
    recipe->resume(state);
    moe->resume(state);
    if (diloco) diloco->resume(state);
    if (low_precision) low_precision->resume(state);
    return state;
  }

  // Collective: every rank writes its pieces of the checkpoint after `done` steps, and what
  // each part records in trainer_state.json (data_state: where the data resumes).
  std::string save(int64_t done, const Json& data_state) {
    return checkpointer->save(done, trainer_state(done, data_state));
  }

  Json trainer_state(int64_t done, const Json& data_state) const {
    Json state = Json::object({{"model_kind", cfg.spec().name},
                               {"run_id", cfg.run.id},
                               {"step", done},
                               {"optimizer_steps", optimizer->steps_taken()},
                               {"seed", int64_t(cfg.run.seed)}});
    if (cfg.diloco) state.set("diloco_workers", cfg.diloco->workers);
    for (const Json& part :
         {data_state, decay.state(), recipe->state(done), diloco ? diloco->state() : Json(),
          moe->state(), low_precision ? low_precision->state() : Json()})
      if (part.is_object())
        for (const auto& [key, value] : part.items()) state.set(key, value);
    return state;
  }

  const Config& cfg;
  const dist::DeviceMesh mesh;
  const std::shared_ptr<dist::ProcessGroup> dp;
  const int rank;
  std::unique_ptr<Recipe> recipe;
  std::unique_ptr<precision::LowPrecision> low_precision;  // null: none
  std::unique_ptr<parallel::ParallelModel> model;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<RunContext> context;
  std::unique_ptr<lowcomm::DiLoCo> diloco;  // null: no DiLoCo
  std::unique_ptr<MoeBalance> moe;
  std::unique_ptr<Checkpointer> checkpointer;
  DecayTiming decay;
};

// The step's parts. fp8_delayed's amaxes are maxed over the ranks that hold the same layers
// (data, context and tensor parallel peers), so every one scales alike and as one process
// would; DiLoCo workers keep their own: nothing crosses the slow link between outer steps.
Loop make_loop(RunParts& run, Prefetcher<Batch>& prefetch, StepGuard& guard,
               const Progress& progress) {
  const Config& cfg = run.cfg;
  const dist::DeviceMesh& mesh = run.mesh;
  auto max_over_replicas = [&mesh, &cfg](std::vector<float>& values) {
    Tensor t = from_vector(values, {int64_t(values.size())});
    for (const char* axis : {cfg.diloco ? "dp_shard" : "dp", "cp", "tp"})
      if (mesh.degree(axis) > 1) mesh.group(axis)->all_reduce(t, dist::ReduceOp::Max)->wait();
    values = to_vector(t);
  };
  return Loop{cfg,
              cfg.train,
              *run.dp,
              cfg.diloco ? *mesh.group("dp_shard") : *run.dp,
              *run.recipe,
              *run.model,
              TrainStep(*run.model, *run.optimizer, cfg.train.precision, cfg.train.grad_accum,
                        cfg.train.grad_clip),
              run.diloco.get(),
              run.low_precision.get(),
              max_over_replicas,
              prefetch,
              guard,
              *run.moe,
              progress,
              run.decay,
              Json(),
              cfg.diloco ? std::make_unique<lowcomm::RoundAgreement>(
                               *mesh.world(), cfg.diloco->inner_steps, run.decay.end_step())
                         : nullptr};
}

// A resumed run that ended at its last step, evaluated, has nothing to do (the main rank's
// events say so; every rank hears it).
bool finished_already(const RunParts& run, int64_t step) {
  const bool mine = run.rank == 0 && last_event_step(run.cfg.run_dir(), "finished") == step;
  return step == run.decay.end_step() && sum_over(*run.mesh.world(), {mine ? 1.0 : 0.0})[0] > 0;
}

// The run's first lines, and (main rank) its config.toml, the recipe's files and the `started`
// event: only a run that starts (or validly resumes) records its config, so a failed --resume
// never overwrites the config of the run it refused.
void announce(const RunParts& run, int64_t start_step) {
  const Config& cfg = run.cfg;
  const TrainLoopConfig& tc = cfg.train;
  const std::string run_dir = cfg.run_dir();
  if (run.rank == 0) {
    fs::create_directories(run_dir);
    write_file_atomic(run_dir + "/config.toml", cfg.resolved_toml);
    run.recipe->write_run_files(run_dir);
  }
  std::printf("%s, batch %lld x %lld, %d threads (%s), %s\n", run.recipe->describe().c_str(),
              (long long)tc.batch_size, (long long)tc.grad_accum, omp_get_max_threads(),
              cpu::wait_policy_description(), run.model->describe().c_str());
  if (const std::string data = run.recipe->describe_data(); !data.empty())
    std::printf("%s\n", data.c_str());
  if (run.low_precision) std::printf("%s\n", run.low_precision->describe().c_str());
  if (!tc.precision_choice.empty()) std::printf("precision %s\n", tc.precision_choice.c_str());
  if (run.rank == 0)  // where the run (or this part of it) ran, for its report
    append_event(run_dir, "started",
                 Json::object({{"step", start_step},
                               {"cpu", cpu_model_name()},
                               {"device", tc.device == cpu_device() ? "cpu" : "cuda"},
                               {"threads", int64_t(omp_get_max_threads())},
                               {"processes", int64_t(run.mesh.world()->size())},
                               {"precision", tc.low_precision
                                                 ? precision::recipe_name(tc.low_precision->recipe)
                                                 : dtype_name(tc.precision)}}));
}

// The step's figures besides loss and learning rate, for the progress line and metrics.jsonl.
Json step_metrics(const RunParts& run, const StepResult& r, int64_t skipped) {
  // sent_mb: what this rank has put on the wire so far (dist/process_group.h).
  Json metrics = Json::object({{"grad_norm", r.grad_norm},
                               {"skipped_steps", skipped},
                               {"sent_mb", double(dist::bytes_sent()) / 1e6}});
  if (run.low_precision) metrics.set("precision", run.low_precision->metrics());
  if (run.moe->active()) metrics.set("moe", run.moe->metrics());
  if (r.outer)
    metrics.set("outer", Json::object({{"sent_mb", double(r.outer->bytes_sent) / 1e6},
                                       {"seconds", r.outer->seconds},
                                       {"delta_norm", r.outer->delta_norm},
                                       {"fragments", r.outer->fragments}}));
  return metrics;
}

// The decay timed to train.max_minutes: fixed in steps once the step rate is known, its time
// checked over the whole world, every step alone, every 10 steps with others, once a round
// under DiLoCo (whose workers exchange nothing between rounds).
void time_decay(RunParts& run, int64_t step, int64_t start_step, Progress& progress,
                lowcomm::RoundAgreement* agreement) {
  const Config& cfg = run.cfg;
  const dist::ProcessGroup& world = *run.mesh.world();
  const int64_t every = cfg.diloco ? cfg.diloco->inner_steps : (world.size() > 1 ? 10 : 1);
  if (!run.decay.pending(step) || (step + 1) % every != 0) return;
  const double elapsed =
      sum_over(*run.mesh.world(), {progress.elapsed_seconds()})[0] / double(world.size());
  if (!run.decay.after_step(step, elapsed, step + 1 - start_step,
                            cfg.diloco ? cfg.diloco->inner_steps : 1))
    return;
  progress.set_total_steps(run.decay.end_step());
  if (agreement) agreement->set_steps(run.decay.end_step());
  if (run.rank == 0) {
    std::printf("%s\n", run.decay.describe().c_str());
    append_event(cfg.run_dir(), "decay_timed", run.decay.state());
  }
}

// After the last step: the throughput, the recipe's final evaluation (into metrics.jsonl and
// TensorBoard), the report and, for a run trained to its end, the `finished` event.
void finish(RunParts& run, Progress& progress, const plan::StepShape& spec, int64_t step,
            int64_t steps_run, double train_seconds) {
  const std::string run_dir = run.cfg.run_dir();
  if (steps_run > 0) {
    const double items = double(steps_run) * double(spec.items_per_step());
    std::printf("trained %lld steps, %.0f %s in %s of steps: %.1f %s/s\n", (long long)steps_run,
                items, spec.unit, format_duration(train_seconds).c_str(), items / train_seconds,
                spec.unit);
  }
  if (const parallel::Pipeline* pipe = run.model->pipeline(); pipe && steps_run > 0) {
    const std::vector<double> waited = run.model->pipeline_waiting();
    const parallel::PipeSimulation sim = parallel::simulate(pipe->schedule);
    if (run.rank == 0) {
      std::string each;
      char pct[16];
      for (double w : waited) {
        std::snprintf(pct, sizeof pct, "%.1f%%", 100 * w);
        each += (each.empty() ? "" : ", ") + std::string(pct);
      }
      std::printf(
          "pipeline (%s): the ranks waited %s of their steps' time for each other; the "
          "schedule's bubble is %.1f%% of the work with passes of equal time\n",
          parallel::name_of(pipe->schedule.kind), each.c_str(), 100 * sim.bubble);
    }
  }
  const Json final_eval = run.recipe->finish({step, steps_run, train_seconds});
  if (run.rank == 0 && final_eval.is_object()) progress.log_final_eval(step, final_eval);
  if (run.rank == 0) {  // the page to read the run by (loom report makes it again at any time)
    const ReportSummary report = write_report(run_dir);
    std::printf("report: %s\n", report.path.c_str());
    // Trained to its end and evaluated: a --resume of it has nothing to do.
    if (step == run.decay.end_step())
      append_event(run_dir, "finished", Json::object({{"step", step}}));
  }
}

}  // namespace

// What of the settings a resume from `state` would refuse (resume_rules.h), against the run's
// config.toml; "" when nothing.
std::string refused_since(const Config& cfg, const Json& state) {
  std::ifstream in(cfg.run_dir() + "/config.toml");
  if (!in) return "";
  const std::string recorded((std::istreambuf_iterator<char>(in)), {});
  const ResumeChanges changes =
      compare_for_resume(recorded, cfg.resolved_toml, state.at("step").as_int());
  std::string list;
  for (const std::string& c : changes.refused) list += (list.empty() ? "" : "; ") + c;
  return list.empty() ? "" : "the settings changed since (" + list + ")";
}

// Resuming: from the in-memory copies when every rank finds one of a step at least as new as
// the disk checkpoint, else from the disk checkpoint (if any). Returns the step to go on from
// and says where it came from (`from`: the checkpoint, or "memory") and in how many seconds.
int64_t resume_run(RunParts& run, const std::string& disk, std::string& from, double& seconds) {
  run.mesh.world()->barrier()->wait();  // the time of the restore, not of the ranks' starts
  const auto begin = Clock::now();
  const int64_t disk_step =
      disk.empty() ? 0 : std::stoll(fs::path(disk).filename().string().substr(5));  // step-N
  int64_t step = -1;
  from = disk;
  if (run.checkpointer->in_memory()) {
    // The settings' changes since the copy as a resume from disk allows them (resume_rules.h).
    const Json state = run.checkpointer->load_from_memory(
        disk_step, [&run](const Json& s) { return refused_since(run.cfg, s); });
    if (!state.is_null()) {
      step = run.resume_parts(state).at("step").as_int();
      from = "memory";
    } else {
      run.checkpointer->forget_memory();  // copies no restore can use
    }
  }
  if (step < 0 && !disk.empty()) step = run.resume(disk).at("step").as_int();
  seconds = seconds_since(begin);
  return std::max<int64_t>(step, 0);
}

// What in-memory copies cost the steps; at the run's end (its last step trained) they go.
void report_memory_copies(RunParts& run, int64_t step, double step_seconds) {
  Checkpointer& c = *run.checkpointer;
  if (run.rank == 0 && c.memory_saves() > 0) {
    const double each = c.memory_seconds() / double(c.memory_saves());
    std::printf(
        "in-memory checkpoints: %lld, each holding its step %.1f ms (%.2f%% of a step every %lld "
        "steps)\n",
        (long long)c.memory_saves(), 1e3 * each,
        100 * each / (step_seconds * double(run.cfg.resilience.memory_checkpoint_every)),
        (long long)run.cfg.resilience.memory_checkpoint_every);
  }
  if (step == run.decay.end_step()) c.forget_memory();
}

void train(const Config& cfg, const std::string& resume_from, bool resuming) {
  const TrainLoopConfig& tc = cfg.train;
  const std::string run_dir = cfg.run_dir();
  set_allow_tf32(tc.tf32);
  RunParts run(cfg);
  int64_t start_step = 0;
  std::string restored_from = resume_from;
  double restore_seconds = 0;
  if (resuming || !resume_from.empty())
    start_step = resume_run(run, resume_from, restored_from, restore_seconds);
  if (start_step > 0) {
    if (finished_already(run, start_step)) {
      std::printf(
          "%s is finished: its %lld steps are trained and evaluated (eval.json, report.html); "
          "nothing to do. To train further: --set train.steps=N with a larger N; to evaluate "
          "again: loom eval %s\n",
          run_dir.c_str(), (long long)start_step, run_dir.c_str());
      return;
    }
    std::printf("resumed from %s at step %lld (restored in %.3f s)\n", restored_from.c_str(),
                (long long)start_step, restore_seconds);
    if (run.rank == 0)
      append_event(
          run_dir, "resumed",
          Json::object(
              {{"step", start_step}, {"checkpoint", restored_from}, {"seconds", restore_seconds}}));
  }
  announce(run, start_step);

  // MFU's yardsticks are measured first, before the batch thread competes for the cores.
  const plan::MfuYardsticks yardsticks = plan::measure_mfu_yardsticks(tc.precision, tc.device);
  // Batches are made on a background thread, in (step, micro) order from start_step, so the
  // step never waits for data.
  int64_t next_step = start_step, next_micro = 0;
  Prefetcher<Batch> prefetch([&] {
    Batch b = run.recipe->make_batch(slot_of(tc, *run.dp, next_step, next_micro));
    if (++next_micro == tc.grad_accum) {
      next_micro = 0;
      ++next_step;
    }
    return b;
  });
  const plan::StepShape spec = step_shape(cfg, tc.batch_size * tc.grad_accum);
  Progress progress(metrics_path(run_dir, run.rank), tc.steps, spec.unit, spec.items_per_step(),
                    /*append=*/start_step > 0);
  if (run.rank == 0 && cfg.run.tensorboard) progress.write_tensorboard(run_dir + "/tensorboard");
  progress.set_time_budget(tc.max_minutes * 60);
  progress.count_memory_of(tc.device.type);
  progress.count_data_wait([&] { return prefetch.waited_seconds(); });
  progress.count_flops(plan::train_step_flops(spec), yardsticks.gemm_gflops, yardsticks.peak_gflops,
                       run.mesh.world()->size());
  StepGuard guard(cfg, run.mesh, *run.model, *run.optimizer, *run.checkpointer, run_dir);
  Profiler profiler(parse_profile_steps(cfg.run.profile_steps), run_dir, *run.mesh.world());
  run.recipe->model().name_for_trace();
  Loop step_loop = make_loop(run, prefetch, guard, progress);

  double train_seconds = 0;  // time in training steps (not evaluation or checkpoints)
  if (run.decay.fixed()) progress.set_total_steps(run.decay.end_step());
  int64_t step = start_step;
  for (; step < run.decay.end_step(); ++step) {
    const auto step_begin = Clock::now();
    profiler.begin_step(step);
    const StepResult r = guard.run_step(
        step, [&] { return step_loop.train_step(step); },
        [&] { return prefetch.waited_seconds(); });
    profiler.end_step(step);
    train_seconds += seconds_since(step_begin);
    time_decay(run, step, start_step, progress, step_loop.agreement.get());

    const bool last = step + 1 == run.decay.end_step();
    Json metrics = step_metrics(run, r, guard.skipped());
    const bool eval_now = cfg.eval.every > 0 && (step + 1) % cfg.eval.every == 0;
    const Json val = eval_now ? run.recipe->evaluate(step) : Json();
    if (!val.is_null()) metrics.set("val", val);
    if (cfg.sample.every > 0 && (step + 1) % cfg.sample.every == 0)
      for (const Recipe::Image& image : run.recipe->images(step))
        progress.add_image(image.tag, image.grid, step + 1);
    if ((step + 1) % tc.log_every == 0 || last || step == start_step || !val.is_null() || r.outer)
      progress.log(step, r.loss, r.lr, metrics, run.moe->summary());
    if (guard.spike_to_replay() >= 0) {  // spike_rollback: back to a checkpoint, and replay
      step = guard.replay([&](const std::string& ckpt) {
        int64_t from = 0;
        prefetch.reset([&] {  // the data, too, goes on from the checkpoint's step
          from = run.resume(ckpt).at("step").as_int();
          next_step = from;
          next_micro = 0;
        });
        return from;
      });
      --step;  // the loop's ++step: the checkpoint's step is the next to train
      continue;
    }
    const bool excluded = guard.excluded_rank() >= 0;
    const bool stop = r.out_of_time || r.preempted || excluded ||
                      (tc.stop_after > 0 && step + 1 == tc.stop_after);
    if ((tc.ckpt_every > 0 && (step + 1) % tc.ckpt_every == 0) || last || stop) {
      const std::string dir =
          guard.checkpoint(step, [&] { return run.save(step + 1, step_loop.data_state); });
      if (run.rank == 0) std::printf("checkpoint %s\n", dir.c_str());
    }
    const int64_t in_memory_every = cfg.resilience.memory_checkpoint_every;
    if (in_memory_every > 0 && (step + 1) % in_memory_every == 0 && !last && !stop)
      run.checkpointer->save_to_memory(step + 1, run.trainer_state(step + 1, step_loop.data_state));
    if (r.preempted) guard.finish_preempted(step + 1);
    if (excluded) guard.finish_excluded(step + 1);
    if (stop) {
      std::printf("stopping after step %lld (%s)\n", (long long)(step + 1),
                  r.out_of_time ? "time budget used" : "train.stop_after");
      ++step;
      break;
    }
  }
  if (run.decay.fixed() && step == run.decay.end_step() && step < tc.steps)
    std::printf("stopping after step %lld (the decay timed to the budget is done, %s used)\n",
                (long long)step, format_duration(progress.elapsed_seconds()).c_str());
  if (step_loop.agreement) step_loop.agreement->settle();
  guard.finish();
  profiler.finish();         // a run stopped inside the profile window still writes its trace
  run.checkpointer->wait();  // the last checkpoint is complete before the run reports or exits
  if (run.checkpointer->in_memory())
    report_memory_copies(run, step,
                         train_seconds / double(std::max<int64_t>(step - start_step, 1)));
  disarm_preemption();  // nothing left to save: a signal ends evaluation and sampling at once
  finish(run, progress, spec, step, step - start_step, train_seconds);
}

void check_fits_in_memory(const Config& c, int world_size) {
  const double physical = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  const double budget = c.run.memory_limit_mb > 0 ? c.run.memory_limit_mb * 1048576.0 : physical;
  const char* against = c.run.memory_limit_mb > 0 ? "run.memory_limit_mb" : "this machine's memory";
  const parallel::Topology& t = c.parallel.topology;
  // A layout that does not match the world is refused by the mesh, naming both: here it only
  // counts as unsharded.
  dist::ParallelDims d;
  try {
    d = t.dims.resolved(world_size);
  } catch (const Error&) {
    d = dist::ParallelDims{};
    d.dp_shard = 1;
  }
  const int zero = d.dp_shard > 1 ? t.zero_stage() : 0;
  const plan::MemoryBound m = plan::memory_lower_bound(step_shape(c, c.train.batch_size),
                                                       world_size, d.tp, d.pp, d.dp_shard, zero);
  std::ostringstream split;
  if (d.tp * d.pp > 1) split << ", split over tp " << d.tp << " x pp " << d.pp;
  if (zero > 0) split << ", ZeRO-" << zero << " over " << d.dp_shard << " shards";
  LOOM_CHECK(m.total_bytes() <= budget)
      << "config: this run cannot fit: the model's " << m.parameters / 1e6 << "M parameters need "
      << m.state_bytes / 1e9 << " GB on each process as f32 weights, gradients and AdamW moments ("
      << world_size << " process" << (world_size == 1 ? "" : "es") << split.str()
      << ") and one batch of " << c.train.batch_size << " (" << m.local_batch << " per process) "
      << m.batch_bytes / 1e9 << " GB, against " << budget / 1e9 << " GB (" << against
      << "); make model.width/depth or train.batch_size smaller, or shard it over more processes";
}

}  // namespace loom::train
