// `loom report RUN`: one self-contained HTML page of a run, from the files the run keeps --
// metrics.jsonl (and each rank's logs/metrics-rank-N.jsonl), events.jsonl, eval.json,
// config.toml, samples/ and samples.png. Plots are inline SVG drawn here, images are embedded
// as data URIs: the page needs no script, no network and no other file.
//
// Sections (by id): summary, loss, lr, throughput, memory, step-time, eval, samples, events,
// ranks. Every section is present; one without data says so. Events with a step (resumptions,
// skipped steps, loss spikes, rollbacks, stragglers, preemption) are marked on the loss curve
// and listed; restarts by `loom launch` are listed.
#pragma once
#include <string>
#include <vector>

#include "loom/core/json.h"

namespace loom::train {

struct ReportSummary {
  std::string path;
  int plots = 0, images = 0, events = 0;
};

// Writes the report of the run directory `run_dir` to out_path ("" = run_dir/report.html),
// atomically. Throws naming the file when the run has no metrics.jsonl or a line is not JSON.
ReportSummary write_report(const std::string& run_dir, const std::string& out_path = "");

// Step records in step order, a step logged more than once (a restart from a checkpoint
// before it, a rollback, a spike's replay) by its last record: the path the run went on.
std::vector<Json> last_record_per_step(std::vector<Json> lines);

}  // namespace loom::train
