// The console progress line and metrics.jsonl, one JSON object per logged step.
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "loom/core/json.h"
#include "loom/core/jsonl_file.h"
#include "loom/diffusion/png.h"
#include "loom/train/tensorboard.h"

namespace loom::train {

class Progress {
 public:
  // metrics_path "": console only (ranks other than the main one). unit: "img" or "tok";
  // items_per_step: images or tokens consumed per optimizer step.
  Progress(const std::string& metrics_path, int64_t total_steps, const char* unit,
           int64_t items_per_step, bool append);
  ~Progress();
  // Logs step (0-based, completed) with its loss, lr and further metrics; prints one console
  // line (with `note` after the loss and lr, if any). Non-finite values are recorded as
  // strings ("nan"), which JSON can hold.
  void log(int64_t step, double loss, double lr, Json extra = Json::object(),
           const std::string& note = "");
  // The run's final evaluation at `step` (1-based, the last step done): one more record,
  // {"step": N, "final_eval": {...}}, without a loss (readers of step records skip it), and
  // TensorBoard scalars final_eval/<figure> at that step.
  void log_final_eval(int64_t step, const Json& figures);
  double elapsed_seconds() const;
  // A time budget (train.max_minutes, as seconds; 0: none): the run stops at whichever comes
  // first, the last step or the budget, and so does the ETA.
  void set_time_budget(double seconds) { budget_s_ = seconds; }
  // The run's end moved (a decay timed to the budget): the ETA counts to `steps`.
  void set_total_steps(int64_t steps) { total_steps_ = steps; }
  // Whose memory the lines report: the host's (default) or the training device's.
  void count_memory_of(DeviceType device) { memory_device_ = device; }
  // The step's time is split into compute, exposed communication (waits on collectives) and
  // idle (waits for data): `data_wait` gives the total seconds spent waiting for data so far.
  void count_data_wait(std::function<double()> data_wait) { data_wait_ = std::move(data_wait); }
  // MFU on each line against two yardsticks, each `ranks` times a rank's figure (GFLOP/s,
  // measured at start-up): the GEMM ceiling (what Loom's matmul reaches on a large square
  // product) and the hardware peak (the vector units' multiply-add rate, plan/hardware_peak.h).
  // `flops_per_step` is the whole job's (train_step_flops). A yardstick below what the steps
  // reach (measured while the machine was busy) is raised to it: MFU never exceeds 100%.
  // Each logged line also as TensorBoard scalars, in an event file under `dir`.
  void write_tensorboard(const std::string& dir);
  // An image (a sample grid) at `step` (1-based) as a TensorBoard image, when it is written.
  void add_image(const std::string& tag, const ImageGrid& grid, int64_t step);
  void count_flops(double flops_per_step, double ceiling_gflops, double hardware_gflops,
                   int ranks) {
    flops_per_step_ = flops_per_step;
    ceiling_flops_ = ceiling_gflops * 1e9 * double(ranks);
    hardware_flops_ = hardware_gflops * 1e9 * double(ranks);
  }

 private:
  std::unique_ptr<JsonlFile> metrics_;  // whole records only (core/jsonl_file.h)
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  int64_t total_steps_, items_per_step_;
  const char* unit_;
  std::chrono::steady_clock::time_point start_, last_time_;
  int64_t last_step_ = -1;
  std::function<double()> data_wait_;
  double flops_per_step_ = 0, ceiling_flops_ = 0, hardware_flops_ = 0, budget_s_ = 0;
  DeviceType memory_device_ = DeviceType::CPU;
  double last_waited_ = 0, last_in_flight_ = 0, last_data_wait_ = 0;  // totals at the last log
};

std::string format_duration(double seconds);  // "1h02m", "3m12s", "45s"

// Seconds until the run ends: the remaining steps at step_s each, or what is left of the
// time budget (budget_s > 0) after elapsed_s, whichever is sooner.
double eta_seconds(double step_s, int64_t steps_left, double budget_s, double elapsed_s);

}  // namespace loom::train
