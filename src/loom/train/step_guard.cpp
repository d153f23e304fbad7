#include "loom/train/step_guard.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "loom/dist/work.h"
#include "loom/ops/ops.h"
#include "loom/train/events.h"

namespace loom::train {

namespace {

Json finite_or_text(double v) { return std::isfinite(v) ? Json(v) : Json(std::to_string(v)); }

// Every rank's host name (up to 63 bytes), gathered as i64 words.
std::vector<std::string> gather_hosts(dist::ProcessGroup& world) {
  constexpr int64_t kWords = 8;
  char name[kWords * 8] = {};
  ::gethostname(name, sizeof name - 1);
  std::vector<int64_t> mine(kWords);
  std::memcpy(mine.data(), name, sizeof name);
  Tensor out = Tensor::empty({kWords * world.size()}, DType::I64);
  world.all_gather(from_vector(mine, {kWords}), out)->wait();
  const std::vector<int64_t> all = to_vector_i64(out);
  std::vector<std::string> hosts;
  for (int r = 0; r < world.size(); ++r) {
    char h[kWords * 8 + 1] = {};
    std::memcpy(h, all.data() + r * kWords, kWords * 8);
    hosts.emplace_back(h);
  }
  return hosts;
}

}  // namespace

StepGuard::StepGuard(const Config& cfg, ParallelRun& par, std::string run_dir)
    : rc_(cfg.resilience),
      par_(par),
      run_dir_(std::move(run_dir)),
      faults_(FaultPlan::from_env()),
      hosts_(gather_hosts(*par.mesh().world())) {}

void StepGuard::begin_step(int64_t step) {
  step_start_ = std::chrono::steady_clock::now();
  waited_at_start_ = dist::comm_times().waited_s;
  faults_.at_step_begin(step + 1, par_.mesh().world()->rank());
}

Tensor StepGuard::guard_loss(const Tensor& loss, int64_t step) const {
  if (!faults_.poisons_loss(step + 1, par_.mesh().world()->rank())) return loss;
  std::fprintf(stderr, "LOOM_FAULT: NaN loss on rank %d at step %lld\n", par_.mesh().world()->rank(),
               (long long)(step + 1));
  return mul_scalar(loss, std::nan(""));
}

bool StepGuard::accept(int64_t step, double loss, double grad_norm) {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    ++skipped_;
    ++in_row_;
    if (par_.main()) {
      std::printf("step %lld skipped: loss %g, gradient norm %g (%lld skipped so far)\n",
                  (long long)(step + 1), loss, grad_norm, (long long)skipped_);
      append_event(run_dir_, "skipped_step",
                   Json::object({{"step", step + 1},
                                 {"loss", finite_or_text(loss)},
                                 {"grad_norm", finite_or_text(grad_norm)},
                                 {"skipped_total", skipped_}}));
    }
    LOOM_CHECK(in_row_ <= rc_.max_skips_in_row)
        << "step " << step + 1 << ": " << in_row_ << " steps in a row had a non-finite loss or "
        << "gradient norm (resilience.max_skips_in_row " << rc_.max_skips_in_row << ")";
    return false;
  }
  in_row_ = 0;
  // Loss spikes: z-score against the last 50 accepted steps.
  if (rc_.spike_zscore > 0 && recent_losses_.size() >= 20) {
    double mean = 0, var = 0;
    for (double l : recent_losses_) mean += l;
    mean /= double(recent_losses_.size());
    for (double l : recent_losses_) var += (l - mean) * (l - mean);
    const double sd = std::sqrt(var / double(recent_losses_.size() - 1));
    const double z = sd > 0 ? (loss - mean) / sd : 0;
    if (z > rc_.spike_zscore && par_.main()) {
      std::printf("step %lld: loss spike %.4f (z-score %.1f over the last %zu steps)\n",
                  (long long)(step + 1), loss, z, recent_losses_.size());
      append_event(run_dir_, "loss_spike",
                   Json::object({{"step", step + 1}, {"loss", loss}, {"zscore", z}}));
    }
  }
  recent_losses_.push_back(loss);
  if (recent_losses_.size() > 50) recent_losses_.pop_front();
  return true;
}

void StepGuard::end_step(int64_t step, double data_wait) {
  auto compute_seconds = [&] {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
    const double waited = dist::comm_times().waited_s - waited_at_start_;
    return std::max(0.0, wall - waited - (data_wait - data_at_start_));
  };
  const double slowdown = faults_.slowdown(step + 1, par_.mesh().world()->rank());
  if (slowdown > 1)
    std::this_thread::sleep_for(std::chrono::duration<double>((slowdown - 1) * compute_seconds()));
  compute_s_ += compute_seconds();
  data_at_start_ = data_wait;
  ++compute_steps_;
  if (rc_.straggler_every == 0 || (step + 1) % rc_.straggler_every != 0) return;
  dist::ProcessGroup& world = *par_.mesh().world();
  Tensor all = Tensor::empty({world.size()});
  world.all_gather(from_vector(std::vector<float>{float(compute_s_ / double(compute_steps_))}, {1}), all)
      ->wait();
  compute_s_ = 0;
  compute_steps_ = 0;
  const std::vector<float> times = to_vector(all);
  std::vector<float> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                          : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  if (!par_.main() || world.size() < 2) return;
  for (int r = 0; r < world.size(); ++r) {
    if (!(times[size_t(r)] > rc_.straggler_factor * median)) continue;
    std::printf("straggler: rank %d on %s computes %.3f s per step, %.1fx the median %.3f s "
                "(steps %lld-%lld)\n",
                r, hosts_[size_t(r)].c_str(), times[size_t(r)], times[size_t(r)] / median, median,
                (long long)(step + 2 - rc_.straggler_every), (long long)(step + 1));
    append_event(run_dir_, "straggler",
                 Json::object({{"step", step + 1},
                               {"rank", r},
                               {"host", hosts_[size_t(r)]},
                               {"compute_s_per_step", double(times[size_t(r)])},
                               {"median_s", median}}));
  }
}

void StepGuard::after_checkpoint(const std::string& dir, int64_t step) {
  if (!faults_.damages_checkpoint(step)) return;
  par_.wait_checkpoint();  // damage what is on disk, not what a background save still writes
  faults_.after_checkpoint(dir, step, par_.mesh().world()->rank());
}

}  // namespace loom::train
