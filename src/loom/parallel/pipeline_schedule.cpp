#include "loom/parallel/pipeline_schedule.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include "loom/core/error.h"

namespace loom::parallel {

std::string PipeSchedule::str() const {
  std::ostringstream s;
  for (int64_t p = 0; p < ranks; ++p) {
    s << "rank " << p << ":";
    for (const PipePass& pass : passes[size_t(p)]) {
      s << ' ' << (pass.forward ? 'F' : 'B') << pass.micro;
      if (chunks > 1) s << '.' << pass.chunk;
    }
    s << '\n';
  }
  return s.str();
}

namespace {

// Interleaved order of a rank's k-th forward (or backward) pass: micro-batches go in groups of
// P through chunk 0, then the same group through chunk 1, ...; backwards visit chunks in
// reverse.
PipePass interleaved_pass(int64_t k, int64_t P, int64_t V, bool forward) {
  const int64_t group = k / (P * V), in_group = k % (P * V);
  int64_t chunk = in_group / P;
  if (!forward) chunk = V - 1 - chunk;
  return {forward, group * P + in_group % P, chunk};
}

}  // namespace

PipeSchedule make_pipe_schedule(ScheduleKind kind, int64_t P, int64_t M, int64_t V) {
  LOOM_CHECK(P >= 1 && M >= 1 && V >= 1) << "pipeline schedule: ranks " << P << ", micro-batches "
                                         << M << " and chunks " << V << " must all be at least 1";
  LOOM_CHECK(V == 1 || kind == ScheduleKind::Interleaved1F1B)
      << "pipeline schedule: " << V << " chunks per rank need the interleaved schedule";
  LOOM_CHECK(kind != ScheduleKind::Interleaved1F1B || M % P == 0)
      << "pipeline schedule: interleaved 1F1B needs the micro-batches (" << M
      << ") to be a multiple of the pipeline ranks (" << P << ")";
  PipeSchedule s{kind, P, V, M, std::vector<std::vector<PipePass>>(size_t(P))};
  for (int64_t p = 0; p < P; ++p) {
    auto& out = s.passes[size_t(p)];
    if (kind == ScheduleKind::GPipe) {
      for (int64_t m = 0; m < M; ++m) out.push_back({true, m, 0});
      for (int64_t m = 0; m < M; ++m) out.push_back({false, m, 0});
      continue;
    }
    const int64_t total = M * V;  // forward passes (and backward passes) on this rank
    const int64_t warmup = kind == ScheduleKind::OneFOneB
                               ? std::min(P - p - 1, M)
                               : std::min((P - p - 1) * 2 + (V - 1) * P, total);
    auto fwd = [&](int64_t k) {
      return V == 1 ? PipePass{true, k, 0} : interleaved_pass(k, P, V, true);
    };
    auto bwd = [&](int64_t k) {
      return V == 1 ? PipePass{false, k, 0} : interleaved_pass(k, P, V, false);
    };
    int64_t f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(fwd(f));
    for (; f < total; ++f, ++b) {
      out.push_back(fwd(f));
      out.push_back(bwd(b));
    }
    for (; b < total; ++b) out.push_back(bwd(b));
  }
  return s;
}

PipeSimulation simulate(const PipeSchedule& s) {
  PipeSimulation sim;
  const int64_t P = s.ranks, S = s.stages();
  // done[(forward, micro, stage)]
  std::set<std::tuple<bool, int64_t, int64_t>> done;
  std::vector<size_t> next(size_t(P), 0);
  std::vector<int64_t> in_flight(size_t(P), 0);
  sim.peak_in_flight.assign(size_t(P), 0);
  size_t remaining = 0;
  for (const auto& r : s.passes) remaining += r.size();
  while (remaining > 0) {
    // Every rank whose next pass has its input runs it in this time step.
    std::vector<std::tuple<int64_t, bool, int64_t, int64_t>> ran;
    for (int64_t p = 0; p < P; ++p) {
      if (next[size_t(p)] == s.passes[size_t(p)].size()) continue;
      const PipePass& pass = s.passes[size_t(p)][next[size_t(p)]];
      LOOM_CHECK(pass.micro >= 0 && pass.micro < s.micro_batches && pass.chunk >= 0 &&
                 pass.chunk < s.chunks)
          << "pipeline schedule: rank " << p << " has a pass outside the micro-batches/chunks";
      const int64_t stage = s.stage_of(p, pass.chunk);
      const bool ready = pass.forward
                             ? stage == 0 || done.count({true, pass.micro, stage - 1})
                             : done.count({true, pass.micro, stage}) &&
                                   (stage == S - 1 || done.count({false, pass.micro, stage + 1}));
      if (ready) ran.emplace_back(p, pass.forward, pass.micro, stage);
    }
    if (ran.empty()) {
      std::ostringstream e;
      e << "deadlock after " << sim.steps << " steps; waiting:";
      for (int64_t p = 0; p < P; ++p)
        if (next[size_t(p)] < s.passes[size_t(p)].size()) {
          const PipePass& pass = s.passes[size_t(p)][next[size_t(p)]];
          e << " rank " << p << " " << (pass.forward ? 'F' : 'B') << pass.micro << "."
            << pass.chunk;
        }
      sim.error = e.str();
      return sim;
    }
    for (auto [p, forward, micro, stage] : ran) {
      if (!done.insert({forward, micro, stage}).second) {
        sim.error = "rank " + std::to_string(p) + " runs " + (forward ? "F" : "B") +
                    std::to_string(micro) + " of stage " + std::to_string(stage) + " twice";
        return sim;
      }
      in_flight[size_t(p)] += forward ? 1 : -1;
      sim.peak_in_flight[size_t(p)] = std::max(sim.peak_in_flight[size_t(p)], in_flight[size_t(p)]);
      ++next[size_t(p)];
      --remaining;
    }
    ++sim.steps;
  }
  if (int64_t(done.size()) != 2 * s.micro_batches * S) {
    sim.error = "the schedule runs " + std::to_string(done.size()) + " passes, expected " +
                std::to_string(2 * s.micro_batches * S);
    return sim;
  }
  sim.ok = true;
  return sim;
}

}  // namespace loom::parallel
