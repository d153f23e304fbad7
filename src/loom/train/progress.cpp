#include "loom/train/progress.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/core/allocator.h"
#include "loom/core/error.h"
#include "loom/core/jsonl_file.h"
#include "loom/dist/work.h"

namespace loom::train {

std::string format_duration(double s) {
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  } else if (t >= 60) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", t);
  }
  return buf;
}

double eta_seconds(double step_s, int64_t steps_left, double budget_s, double elapsed_s) {
  const double by_steps = step_s * double(steps_left);
  return budget_s > 0 ? std::max(0.0, std::min(by_steps, budget_s - elapsed_s)) : by_steps;
}

Progress::Progress(const std::string& metrics_path, int64_t total_steps, const char* unit,
                   int64_t items_per_step, bool append)
    : total_steps_(total_steps), items_per_step_(items_per_step), unit_(unit) {
  if (!metrics_path.empty()) metrics_ = std::make_unique<JsonlFile>(metrics_path, append);
  start_ = last_time_ = std::chrono::steady_clock::now();
}

Progress::~Progress() = default;

void Progress::add_image(const std::string& tag, const ImageGrid& grid, int64_t step) {
  if (tensorboard_)
    tensorboard_->add_image(tag, encode_png(grid.pixels, grid.width, grid.height, grid.channels),
                            grid.width, grid.height, grid.channels, step);
}

void Progress::write_tensorboard(const std::string& dir) {
  tensorboard_ = std::make_unique<TensorBoardWriter>(dir);
}

void Progress::log_final_eval(int64_t step, const Json& figures) {
  const Json record = Json::object({{"step", step}, {"final_eval", figures}});
  if (metrics_) metrics_->append(record.dump());
  if (tensorboard_) tensorboard_->add_scalars(Json::object({{"final_eval", figures}}), step);
}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

namespace {
// Console names of the memory categories, in MemCategory order.
constexpr const char* kShortNames[kNumMemCategories] = {"param", "grad", "optim",
                                                        "act",   "comm", "other"};
Json number(double v) {
  return std::isfinite(v) ? Json(v) : Json(std::to_string(v));
}
}  // namespace

void Progress::log(int64_t step, double loss, double lr, Json extra, const std::string& note) {
  Json metrics = Json::object({{"step", step + 1}, {"loss", number(loss)}, {"lr", lr}});
  for (const auto& [k, v] : extra.items())
    metrics.set(k, v.is_double() ? number(v.as_double()) : v);
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_time_).count();
  const int64_t steps_done = last_step_ < 0 ? 0 : step - last_step_;
  const double rate = steps_done > 0 && dt > 0 ? double(steps_done * items_per_step_) / dt : 0.0;
  const double step_time = steps_done > 0 ? dt / double(steps_done) : 0.0;
  last_time_ = now;
  last_step_ = step;
  // Per step since the last line: compute, exposed communication, idle (see the header).
  const dist::CommTimes comm = dist::comm_times();
  const double data_wait = data_wait_ ? data_wait_() : 0.0;
  // Step time split (ms per step since the last line) and MFU; "-" on the first line.
  char split[128] = "-", mfu[64] = "";
  if (steps_done > 0) {
    const double n = double(steps_done), waited = comm.waited_s - last_waited_,
                 idle = data_wait - last_data_wait_, compute = dt - waited - idle;
    metrics.set("time_s",
                Json::object({{"step", dt / n},
                              {"compute", compute / n},
                              {"comm_exposed", waited / n},
                              {"idle", idle / n},
                              {"comm_in_flight", (comm.in_flight_s - last_in_flight_) / n}}));
    std::snprintf(split, sizeof split, "%.0f ms/step (compute %.0f, comm %.0f, data %.0f)",
                  1e3 * dt / n, 1e3 * compute / n, 1e3 * waited / n, 1e3 * idle / n);
    if (ceiling_flops_ > 0) {
      const double achieved = flops_per_step_ * n / dt;
      // The GEMM ceiling is what the machine was seen to do: a start-up measurement that a
      // loaded machine made low is raised to what the steps reached (never an MFU over 100%).
      ceiling_flops_ = std::max(ceiling_flops_, achieved);
      metrics.set("mfu", Json(achieved / ceiling_flops_));
      metrics.set("gflops", Json(achieved / 1e9));
      std::snprintf(mfu, sizeof mfu, " | MFU %.0f%% of GEMM", 100.0 * achieved / ceiling_flops_);
      if (hardware_flops_ > 0) {
        hardware_flops_ = std::max(hardware_flops_, achieved);  // the same rule as the ceiling
        metrics.set("mfu_hardware", Json(achieved / hardware_flops_));
        const size_t used = std::strlen(mfu);
        std::snprintf(mfu + used, sizeof mfu - used, ", %.0f%% of peak",
                      100.0 * achieved / hardware_flops_);
      }
    }
  }
  last_waited_ = comm.waited_s;
  last_in_flight_ = comm.in_flight_s;
  last_data_wait_ = data_wait;
  const MemStats mem = allocator_for(memory_device_).stats();
  metrics.set(std::string(unit_) + "_per_s", Json(rate));
  metrics.set("elapsed_s", Json(elapsed_seconds()));
  metrics.set("mem_live_bytes", Json(mem.live_total));
  metrics.set("mem_peak_bytes", Json(mem.peak_total));
  // Per category (this rank): {"parameters": {"live": bytes, "peak": bytes}, ...}.
  Json by_category = Json::object();
  std::string breakdown;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const char* name = mem_category_name(MemCategory(c));
    by_category.set(name,
                    Json::object({{"live", mem.live[size_t(c)]}, {"peak", mem.peak[size_t(c)]}}));
    char part[48];
    std::snprintf(part, sizeof part, "%s%s %.0f", c ? " " : "", kShortNames[c],
                  double(mem.live[size_t(c)]) / 1e6);
    breakdown += part;
  }
  metrics.set("mem", by_category);
  if (metrics_) metrics_->append(metrics.dump());  // a full disk stops the run
  if (tensorboard_) tensorboard_->add_scalars(metrics, step + 1);
  const double elapsed = elapsed_seconds();
  const double eta = eta_seconds(step_time, total_steps_ - step - 1, budget_s_, elapsed);
  const bool budget_first = budget_s_ > 0 && eta < step_time * double(total_steps_ - step - 1);
  std::printf(
      "step %6lld/%lld | loss %.4f | lr %.2e%s%s | %7.0f %s/s%s | %s | %s elapsed | ETA %s%s | "
      "mem %.0f MB (%s; peak %.0f)\n",
      (long long)(step + 1), (long long)total_steps_, loss, lr, note.empty() ? "" : " | ",
      note.c_str(), rate, unit_, mfu, split, format_duration(elapsed).c_str(),
      steps_done > 0 ? format_duration(eta).c_str() : "-",
      steps_done > 0 && budget_first ? " (max_minutes)" : "", double(mem.live_total) / 1e6,
      breakdown.c_str(), double(mem.peak_total) / 1e6);
  std::fflush(stdout);
}

}  // namespace loom::train
