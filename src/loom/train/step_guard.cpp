#include "loom/train/step_guard.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "loom/backend/backend.h"
#include "loom/checkpoint/sharded.h"
#include "loom/dist/hosts.h"
#include "loom/dist/work.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/events.h"
#include "loom/train/preemption.h"

namespace loom::train {

namespace {

Json finite_or_text(double v) {
  return std::isfinite(v) ? Json(v) : Json(std::to_string(v));
}

}  // namespace

StepGuard::StepGuard(const Config& cfg, const dist::DeviceMesh& mesh,
                     const parallel::ParallelModel& model, const optim::AdamW& optimizer,
                     Checkpointer& checkpointer, std::string run_dir)
    : rc_(cfg.resilience),
      mesh_(mesh),
      model_(model),
      optimizer_(optimizer),
      checkpointer_(checkpointer),
      main_(mesh.world()->rank() == 0),
      run_dir_(std::move(run_dir)),
      run_id_(cfg.run.id),
      faults_(FaultPlan::from_env()),
      hosts_(dist::gather_names(*mesh.world(), dist::this_host())),
      heartbeat_path_(run_dir_ + "/logs/heartbeat-rank-" + std::to_string(mesh.world()->rank())) {
  std::filesystem::create_directories(run_dir_ + "/logs");
  // A layout where no two ranks hold the same weights (each pipeline stage alone) has nothing
  // for the consistency check to compare: said once, not passed over in silence.
  const bool comparable = model.replicas().size() > 1 || mesh.degree("tp") > 1 ||
                          mesh.degree("cp") > 1 || mesh.degree("dp_shard") > 1;
  if (rc_.consistency_every > 0 && mesh.world()->size() > 1 && !comparable && main_)
    std::printf(
        "resilience.consistency_every: no two ranks of this layout hold the same weights (%s); "
        "silent corruption of one cannot be seen by comparing them\n",
        mesh.dims().str().c_str());
}

void StepGuard::begin_step(int64_t step) {
  const int rank = mesh_.world()->rank();
  // The first step of this process ends its start-up (what the supervisor's start-up bound
  // measures); the startup fault delays it.
  if (last_beat_ == std::chrono::steady_clock::time_point{}) faults_.at_startup(rank);
  step_start_ = std::chrono::steady_clock::now();
  waited_at_start_ = dist::comm_times().waited_s;
  // The heartbeat a supervisor watches (launch --hang-timeout), at most once a second.
  if (step_start_ - last_beat_ >= std::chrono::seconds(1)) {
    last_beat_ = step_start_;
    std::ofstream(heartbeat_path_, std::ios::trunc) << "step " << step + 1 << "\n";
  }
  faults_.at_step_begin(step + 1, rank);
  std::string param;
  if (faults_.flips_bit(step + 1, rank, &param)) {
    const auto& pieces = model_.pieces();
    size_t k = 0;
    while (k < pieces.size() && pieces[k].name.find(param) == std::string::npos) ++k;
    LOOM_CHECK(k < pieces.size()) << "LOOM_FAULT bitflip: rank " << rank << " holds no piece "
                                  << "named like '" << param << "'";
    const Tensor& weight = pieces[k].value;
    const Tensor first = weight.as_strided({1}, {1}, weight.offset());
    const Tensor host = to_device(first, cpu_device());  // the weight itself on the host
    *static_cast<uint32_t*>(host.data_ptr()) ^= 1u;  // the lowest mantissa bit of its first value
    if (!host.is_same(first)) backend_for(weight.device()).copy(host, first);
    std::fprintf(stderr, "LOOM_FAULT: rank %d flipped a bit of %s at step %lld\n", rank,
                 pieces[k].name.c_str(), (long long)(step + 1));
  }
}

void StepGuard::check_replicas(int64_t step) {
  checked_step_ = step;
  // A hash of this rank's pieces (where the group holds them alike) and their AdamW moments.
  const auto state = optimizer_.named_state();  // exp_avg, exp_avg_sq per piece, in order
  auto hash_of = [&](const std::function<bool(size_t)>& alike, bool with_layout) {
    uint64_t h = 0;
    auto hash = [&h](const Tensor& t) {
      const Tensor host = to_device(t, cpu_device());
      h = xxh64(host.data_ptr(), host.nbytes(), h);
    };
    for (size_t k = 0; k < model_.pieces().size(); ++k) {
      if (!alike(k)) continue;
      const parallel::ParamPiece& p = model_.pieces()[k];
      if (with_layout) {
        const std::string where =
            p.name + "[" + std::to_string(p.begin) + ":" + std::to_string(p.end) + "]";
        h = xxh64(where.data(), where.size(), h);
        continue;
      }
      hash(p.value);
      if (2 * k + 1 < state.size()) {
        hash(state[2 * k].second);
        hash(state[2 * k + 1].second);
      }
    }
    return int64_t(h);
  };
  // Data-parallel replicas (DDP ranks, HSDP replicas) hold the same pieces.
  dist::ProcessGroup& replicas = model_.replicas();
  if (replicas.size() > 1)
    compare_hashes(replicas, hash_of([&](size_t k) { return model_.replicated(k); }, false), step,
                   "replicas");
  // Context parallelism splits the sequence, not the weights: its ranks hold the same pieces.
  if (mesh_.degree("cp") > 1) {
    dist::ProcessGroup& cp = *mesh_.group("cp");
    auto every = [](size_t) { return true; };
    const std::vector<int64_t> layouts = gather_i64(cp, hash_of(every, true));
    if (std::all_of(layouts.begin(), layouts.end(), [&](int64_t x) { return x == layouts[0]; }))
      compare_hashes(cp, hash_of(every, false), step, "context-parallel ranks");
  }
  // The ranks of a ZeRO shard group hold the same gathered copies of its parameters.
  for (auto [group, h] : model_.zero_copies())
    compare_hashes(*group, int64_t(h), step, "ZeRO shard ranks' gathered copies");
  // The ranks of a tensor-parallel group hold the parameters it does not split (norms, biases,
  // position embeddings) alike -- where their pieces line up (the same names and ranges).
  if (mesh_.degree("tp") > 1) {
    dist::ProcessGroup& tp = *mesh_.group("tp");
    auto alike = [&](size_t k) { return model_.held_alike_over_tp(k); };
    const std::vector<int64_t> layouts = gather_i64(tp, hash_of(alike, true));
    if (std::all_of(layouts.begin(), layouts.end(), [&](int64_t x) { return x == layouts[0]; }))
      compare_hashes(tp, hash_of(alike, false), step, "tensor-parallel ranks");
  }
}

std::vector<int64_t> StepGuard::gather_i64(dist::ProcessGroup& group, int64_t value) {
  Tensor all = Tensor::empty({group.size()}, DType::I64);
  group.all_gather(from_vector(std::vector<int64_t>{value}, {1}), all)->wait();
  return to_vector_i64(all);
}

void StepGuard::compare_hashes(dist::ProcessGroup& group, int64_t h, int64_t step,
                               const char* what) {
  const std::vector<int64_t> hashes = gather_i64(group, h);
  if (std::all_of(hashes.begin(), hashes.end(), [&](int64_t x) { return x == hashes[0]; })) return;
  // The odd ones out: ranks whose hash fewer members share than the most common one.
  size_t best = 0;
  for (size_t i = 0; i < hashes.size(); ++i)
    if (std::count(hashes.begin(), hashes.end(), hashes[i]) >
        std::count(hashes.begin(), hashes.end(), hashes[best]))
      best = i;
  // Without a strict majority (say 2 members) every rank is suspect.
  const bool majority =
      2 * std::count(hashes.begin(), hashes.end(), hashes[best]) > int64_t(hashes.size());
  std::string odd;
  Json ranks = Json::array();
  for (size_t i = 0; i < hashes.size(); ++i)
    if (!majority || hashes[i] != hashes[best]) {
      const int world_rank = group.world_ranks()[i];
      odd += (odd.empty() ? "" : ", ") + std::to_string(world_rank) + " (" +
             hosts_[size_t(world_rank)] + ")";
      ranks.push_back(world_rank);
    }
  if (main_)
    append_event(run_dir_, "replica_mismatch",
                 Json::object({{"step", step + 1}, {"ranks", ranks}, {"group", group.name()}}));
  LOOM_FAIL() << "step " << step + 1 << ": the " << what << " of group " << group.describe()
              << " hold different weights or optimizer state; "
              << (majority ? "differing from the majority: " : "no majority among: ") << odd
              << " (silent data corruption?). Stopping before it is checkpointed.";
}

bool StepGuard::preemption_noted() const {
  return preemption_signal() != 0;
}

bool StepGuard::preempted() {
  if (mesh_.world()->size() == 1) return preemption_noted();
  Tensor flag = from_vector(std::vector<float>{float(preemption_noted())}, {1});
  mesh_.world()->all_reduce(flag, dist::ReduceOp::Max)->wait();
  return to_vector(flag)[0] > 0;
}

void StepGuard::finish_preempted(int64_t step) {
  checkpointer_.wait();
  const int signal = preemption_signal();
  const std::string dir = checkpoint_dir_name(run_dir_, step);
  if (main_) {
    append_event(run_dir_, "preempted", Json::object({{"step", step}, {"checkpoint", dir}}));
    std::printf(
        "preempted: checkpoint %s written after step %lld; exiting with status %d "
        "(continue with --resume auto)\n",
        dir.c_str(), (long long)step, kExitPreempted);
    std::fflush(stdout);
  }
  throw Preempted("preempted" + std::string(signal ? " by signal " + std::to_string(signal) : "") +
                  " after step " + std::to_string(step) + "; checkpoint " + dir);
}

void StepGuard::before_checkpoint(int64_t step) {
  if (checked_step_ != step) check_replicas(step);
}

Tensor StepGuard::guard_loss(const Tensor& loss, int64_t step) const {
  if (const double factor = faults_.spike(step + 1); factor > 1) {
    if (main_)
      std::fprintf(stderr, "LOOM_FAULT: the loss of step %lld is %g times larger\n",
                   (long long)(step + 1), factor);
    return mul_scalar(loss, factor);
  }
  if (!faults_.poisons_loss(step + 1, mesh_.world()->rank())) return loss;
  std::fprintf(stderr, "LOOM_FAULT: NaN loss on rank %d at step %lld\n", mesh_.world()->rank(),
               (long long)(step + 1));
  return mul_scalar(loss, std::nan(""));
}

bool StepGuard::skip(int64_t step, double loss, double grad_norm, const char* why) {
  ++skipped_;
  ++in_row_;
  if (main_) {
    std::printf("step %lld skipped (%s): loss %g, gradient norm %g (%lld skipped so far)\n",
                (long long)(step + 1), why, loss, grad_norm, (long long)skipped_);
    append_event(run_dir_, "skipped_step",
                 Json::object({{"step", step + 1},
                               {"why", why},
                               {"loss", finite_or_text(loss)},
                               {"grad_norm", finite_or_text(grad_norm)},
                               {"skipped_total", skipped_}}));
  }
  return false;
}

bool StepGuard::accept(int64_t step, double loss, double grad_norm) {
  if (replay_skips_.count(step))
    return skip(step, loss, grad_norm, "a loss spike's batch, replayed");
  if (!std::isfinite(loss) || !std::isfinite(grad_norm))
    return skip(step, loss, grad_norm, "not finite");
  // Loss spikes: z-score against the last 50 accepted steps.
  if (rc_.spike_zscore > 0 && recent_losses_.size() >= 20) {
    double mean = 0, var = 0;
    for (double l : recent_losses_) mean += l;
    mean /= double(recent_losses_.size());
    for (double l : recent_losses_) var += (l - mean) * (l - mean);
    const double sd = std::sqrt(var / double(recent_losses_.size() - 1));
    const double z = sd > 0 ? (loss - mean) / sd : 0;
    if (z > rc_.spike_zscore) {
      if (main_) {
        std::printf("step %lld: loss spike %.4f (z-score %.1f over the last %zu steps)\n",
                    (long long)(step + 1), loss, z, recent_losses_.size());
        append_event(run_dir_, "loss_spike",
                     Json::object({{"step", step + 1}, {"loss", loss}, {"zscore", z}}));
      }
      if (rc_.spike_rollback) spike_step_ = step;
      if (rc_.skip_spikes || rc_.spike_rollback) return skip(step, loss, grad_norm, "loss spike");
    }
  }
  in_row_ = 0;
  recent_losses_.push_back(loss);
  if (recent_losses_.size() > 50) recent_losses_.pop_front();
  return true;
}

Json StepGuard::roll_back(int64_t step) {
  LOOM_CHECK(rollbacks_ < rc_.max_rollbacks)
      << "step " << step + 1 << ": " << in_row_ << " steps in a row were skipped, and the run "
      << "has rolled back " << rollbacks_ << " times already (resilience.max_rollbacks)";
  checkpointer_.wait();
  const std::string ckpt = newest_valid_checkpoint(run_dir_, run_id_, *mesh_.world());
  LOOM_CHECK(!ckpt.empty()) << "step " << step + 1 << ": " << in_row_
                            << " steps in a row were skipped and there is no checkpoint to roll "
                            << "back to (set train.ckpt_every)";
  const Json state = checkpointer_.load(ckpt);
  ++rollbacks_;
  in_row_ = 0;
  recent_losses_.clear();
  const int64_t from = state.at("step").as_int();
  if (main_) {
    std::printf(
        "step %lld: %lld steps in a row skipped; rolled back to %s and skipping the data "
        "of steps %lld-%lld\n",
        (long long)(step + 1), (long long)rc_.max_skips_in_row, ckpt.c_str(), (long long)(from + 1),
        (long long)(step + 1));
    append_event(run_dir_, "rollback",
                 Json::object({{"step", step + 1},
                               {"checkpoint", ckpt},
                               {"skipped_data_steps", Json::array({from + 1, step + 1})}}));
  }
  return state;
}

int64_t StepGuard::replay(const std::function<int64_t(const std::string&)>& resume) {
  const int64_t spike = spike_step_;
  spike_step_ = -1;
  LOOM_CHECK(rollbacks_ < rc_.max_rollbacks)
      << "step " << spike + 1 << ": a loss spike, and the run has rolled back " << rollbacks_
      << " times already (resilience.max_rollbacks)";
  checkpointer_.wait();
  const std::string ckpt = newest_valid_checkpoint(run_dir_, run_id_, *mesh_.world());
  LOOM_CHECK(!ckpt.empty()) << "step " << spike + 1
                            << ": a loss spike and no checkpoint to roll back to (set "
                            << "train.ckpt_every, or resilience.spike_rollback = false)";
  const int64_t from = resume(ckpt);
  ++rollbacks_;
  in_row_ = 0;
  recent_losses_.clear();
  replay_skips_.insert(spike);
  if (main_) {
    std::printf(
        "step %lld: loss spike; rolled back to %s, replaying steps %lld-%lld with their data "
        "and skipping step %lld's batch\n",
        (long long)(spike + 1), ckpt.c_str(), (long long)(from + 1), (long long)spike,
        (long long)(spike + 1));
    append_event(run_dir_, "rollback",
                 Json::object({{"step", spike + 1},
                               {"checkpoint", ckpt},
                               {"replay_from", from + 1},
                               {"skipped_batch_step", spike + 1}}));
  }
  return from;
}

void StepGuard::end_step(int64_t step, double data_wait) {
  auto compute_seconds = [&] {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
    const double waited = dist::comm_times().waited_s - waited_at_start_;
    return std::max(0.0, wall - waited - (data_wait - data_at_start_));
  };
  const double slowdown = faults_.slowdown(step + 1, mesh_.world()->rank());
  if (slowdown > 1)
    std::this_thread::sleep_for(std::chrono::duration<double>((slowdown - 1) * compute_seconds()));
  compute_s_ += compute_seconds();
  data_at_start_ = data_wait;
  ++compute_steps_;
  if (rc_.consistency_every > 0 && (step + 1) % rc_.consistency_every == 0) check_replicas(step);
  if (rc_.straggler_every == 0 || (step + 1) % rc_.straggler_every != 0) return;
  // The comparison of the period before this one, long since gathered: nobody waits on a
  // round trip for it (on a slow link it would hold every rank's step).
  report_stragglers();
  dist::ProcessGroup& world = *mesh_.world();
  times_in_ = from_vector(std::vector<float>{float(compute_s_ / double(compute_steps_))}, {1});
  times_ = Tensor::empty({world.size()});
  times_work_ = world.all_gather(times_in_, times_);
  times_steps_ = {step + 2 - compute_steps_, step + 1};
  compute_s_ = 0;
  compute_steps_ = 0;
}

void StepGuard::report_stragglers() {
  if (!times_work_) return;
  times_work_->wait();
  times_work_ = nullptr;
  const std::vector<float> times = to_vector(times_);
  dist::ProcessGroup& world = *mesh_.world();
  if (world.size() < 2) return;
  const auto [first, last] = times_steps_;
  flags_in_row_.resize(size_t(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    // Against the median of the other ranks: with two ranks, the other one.
    std::vector<float> others;
    for (int o = 0; o < world.size(); ++o)
      if (o != r) others.push_back(times[size_t(o)]);
    std::sort(others.begin(), others.end());
    const size_t n = others.size();
    const double median = n % 2 ? others[n / 2] : 0.5 * (others[n / 2 - 1] + others[n / 2]);
    std::vector<Json>& in_row = flags_in_row_[size_t(r)];
    if (!(times[size_t(r)] > rc_.straggler_factor * median)) {
      in_row.clear();
      continue;
    }
    const Json flag = Json::object({{"step", last},
                                    {"rank", r},
                                    {"host", hosts_[size_t(r)]},
                                    {"compute_s_per_step", double(times[size_t(r)])},
                                    {"others_median_s", median}});
    // Every rank counts the same flags from the same times: the exclusion needs no agreement.
    in_row.push_back(flag);
    if (excluded_rank_ < 0 && rc_.exclude_stragglers_after > 0 &&
        int64_t(in_row.size()) >= rc_.exclude_stragglers_after)
      excluded_rank_ = r;
    if (!main_) continue;
    std::printf(
        "straggler: rank %d on %s computes %.3f s per step, %.1fx the other ranks' "
        "median %.3f s (steps %lld-%lld)\n",
        r, hosts_[size_t(r)].c_str(), times[size_t(r)], times[size_t(r)] / median, median,
        (long long)first, (long long)last);
    append_event(run_dir_, "straggler", flag);
  }
}

void StepGuard::finish_excluded(int64_t step) {
  checkpointer_.wait();
  const std::string dir = checkpoint_dir_name(run_dir_, step);
  const int r = excluded_rank_;
  if (main_) {
    append_event(run_dir_, "exclude",
                 Json::object({{"step", step},
                               {"rank", r},
                               {"host", hosts_[size_t(r)]},
                               {"reason", "straggler"},
                               {"evidence", Json::array(flags_in_row_[size_t(r)])},
                               {"checkpoint", dir}}));
    std::printf(
        "exclude: rank %d on %s was a straggler at %lld comparisons in a row "
        "(resilience.exclude_stragglers_after); checkpoint %s written after step %lld; exiting "
        "with status %d (loom launch --min-ranks restarts without it)\n",
        r, hosts_[size_t(r)].c_str(), (long long)flags_in_row_[size_t(r)].size(), dir.c_str(),
        (long long)step, kExitExcluded);
    std::fflush(stdout);
  }
  throw Excluded("rank " + std::to_string(r) + " excluded as a straggler after step " +
                 std::to_string(step));
}

void StepGuard::after_checkpoint(const std::string& dir, int64_t step) {
  if (!faults_.damages_checkpoint(step)) return;
  checkpointer_.wait();  // damage what is on disk, not what a background save still writes
  faults_.after_checkpoint(dir, step, mesh_.world()->rank());
}

}  // namespace loom::train
