// `loom report RUN`: a run's report, one self-contained HTML page.
#include "loom/train/report.h"
#include <cstdio>
#include "commands.h"

namespace loom::cli {

namespace {

struct ReportArgs {
  std::string run, out;
};

void add_report(CLI::App& cmd, ReportArgs& a) {
  cmd.description(
      "write a run's report: one self-contained HTML page with its curves, memory, "
      "step-time split, evaluation, sample grids and events");
  cmd.add_option("run", a.run, "the run directory")->required()->type_name("RUN");
  cmd.add_option("--out", a.out, "the HTML file (default RUN/report.html)")->type_name("FILE");
}
int report_command(const ReportArgs& a) {
  const train::ReportSummary r = train::write_report(a.run, a.out);
  std::printf("report: %s (%d plots, %d images, %d events)\n", r.path.c_str(), r.plots, r.images,
              r.events);
  return 0;
}

}  // namespace

void add_report_command(CLI::App& loom, int& code) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = loom.add_subcommand("report");
  add_report(*cmd, *a);
  cmd->callback([a, &code] { code = report_command(*a); });
}

}  // namespace loom::cli
